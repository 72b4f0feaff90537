"""The daemon's memory budget: one rule, decided on the controller from the host's facts.

The config step writes the figure, preflight refuses a host the rule refuses, the drain
step and the guard's recipe hand the figure to the host as data (the host never works it
out again). The rule, from the container's cgroup limit (v1 or v2, as the host reports it),
what the container's other processes hold (a curio sidecar, rollout's supervisor and guard:
measured by the facts before any stop), and the playbook's daemon.total_budget,
daemon.safety_margin, validate.proof_kind and preflight.min_budget:

- total_budget "cgroup": the limit less the safety margin and less what the other
  processes hold (rounded up to NEIGHBOUR_GRAIN, so that a few MiB more or less do not change
  the config at every run). A host that shows no cgroup limit is refused, naming
  daemon.total_budget: MemTotal inside a container is the machine's RAM, not the
  container's, so it is never used (issue 17).
- total_budget a size: that size, which must fit in the same room where the host shows a
  limit; where it shows none, the setting is taken as it is, and said so.
- Either way, a budget with which cuzk never proves validate.proof_kind (ProofNeed: below
  one proof's SRS + one partition, or where the first proof's PCE extraction leaves no room
  for a partition: porep-32g needs 72 GiB) or below preflight.min_budget is refused before
  anything is stopped, naming every figure, and so is one under 1 MiB (the config says it in
  whole MiB). One that proves but never caches the kind's PCE (porep-32g under 84 GiB)
  passes with a warning.

A limit the host reports that is not a positive number of bytes below HUGE_LIMIT (a
negative or zero figure, a string, a boolean, cgroup v1's "no limit" of about 2**63) counts
as no visible limit.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from rollout.config.params_manifest import kind as proof_kind
from rollout.config.playbook import Playbook
from rollout.host.facts import MemoryFacts
from rollout.host.scripts.common import HUGE_LIMIT
from rollout.units import format_size, parse_size

CGROUP = "cgroup"
WARNING = "WARNING: "  # a preflight note that is a warning starts so (and is a warning event)
MIB = 1 << 20  # the config says the budget in whole MiB
NEIGHBOUR_GRAIN = 64 * MIB  # what other processes hold, rounded up to this


@dataclass(frozen=True)
class Sum:
    """A figure of cuzk's memory model and the terms it is made of, said for people:
    `84.0GiB (90194313216 bytes) = SRS 44.0GiB + PCE extraction 14.0GiB + PCE 26.0GiB`."""

    terms: tuple[tuple[str, int], ...]

    @property
    def bytes(self) -> int:
        return sum(size for _, size in self.terms)

    @property
    def text(self) -> str:
        return f"{format_size(self.bytes)} ({self.bytes} bytes) = {self.terms_text}"

    @property
    def short(self) -> str:
        return f"{format_size(self.bytes)} = {self.terms_text}"

    @property
    def terms_text(self) -> str:
        return " + ".join(f"{name} {format_size(size)}" for name, size in self.terms)


@dataclass(frozen=True)
class ProofNeed:
    """What a daemon proving one kind needs in cuzk's memory model (curio's
    extern/cuzk/cuzk-core/src), from the kind's figures in resources/params/kinds.yaml:

    - one proof: its SRS, reserved whole before the first proof (engine.rs:
      budget.acquire(srs_file_size)), and one partition's working set (memory.rs
      *_FULL_BYTES; cuzk acquires partitions one at a time, so `partitions` is 1). Less,
      and acquire() waits forever.
    - the PCE extraction: at the daemon's first proof of the kind, a background thread
      try_acquire()s PCE_EXTRACTION_TRANSIENT_BYTES, retried every second, and holds it
      while PceCache::insert_blocking waits for the PCE's own bytes (engine.rs,
      pipeline.rs). From SRS + transient it gets it; under SRS + transient + one partition
      no partition fits beside it then, and every later proof waits forever (a deadlock).
    - the PCE cached: SRS + transient + PCE to insert it, SRS + PCE + one partition to
      prove beside it once the transient is gone. Under that the extraction never gets its
      transient, or holds it for the daemon's life: proofs work, without the PCE."""

    kind: str
    srs: int
    partition: int
    transient: int
    pce: int
    partitions: int = 1

    @classmethod
    def of(cls, kind: str | None) -> ProofNeed | None:
        """The figures of the kind `kind` in the shipped table; None without a kind."""
        if kind is None:
            return None
        row = proof_kind(kind)
        return cls(kind, srs=row.srs, partition=row.partition, transient=row.pce_transient,
                   pce=row.pce_bytes, partitions=row.partitions)

    def _terms(self, *names: str) -> Sum:
        working = ("one partition" if self.partitions == 1
                   else f"{self.partitions} partitions", self.partition * self.partitions)
        known = {"srs": ("SRS", self.srs), "partition": working,
                 "transient": ("PCE extraction", self.transient), "pce": ("PCE", self.pce)}
        return Sum(tuple(known[n] for n in names))

    @property
    def one_proof(self) -> Sum:
        return self._terms("srs", "partition")

    @property
    def extraction(self) -> Sum:
        return self._terms("srs", "transient")

    @property
    def floor(self) -> Sum:
        """The least budget that cannot deadlock, whatever the extraction does."""
        return self._terms("srs", "transient", "partition")

    @property
    def cached(self) -> Sum:
        """The least budget with which cuzk caches the PCE and proves beside it."""
        return max((self._terms("srs", "transient", "pce"), self._terms("srs", "pce", "partition"),
                    self.floor), key=lambda s: s.bytes)

    def refusal(self, size: int) -> str | None:
        """Why a budget of `size` bytes never proves this kind (after 'memory budget X is'),
        with every figure; None where it can."""
        if size < self.one_proof.bytes:
            why = (f"too small for one {self.kind} proof, which needs {self.one_proof.text}: "
                   "cuzk would wait forever in acquire()")
        elif self.extraction.bytes <= size < self.floor.bytes:
            why = (f"too small for a {self.kind} daemon once its first proof's PCE extraction "
                   f"holds its {format_size(self.transient)}, which needs {self.floor.text}: "
                   f"the extraction takes them from {self.extraction.short} and keeps them "
                   "while it waits for the PCE, so no partition fits beside it and cuzk "
                   "would wait forever in acquire() at every later proof")
        else:
            return None
        return (f"{why} (cuzk's memory model, validate.proof_kind: give the daemon "
                f"{format_size(self.floor.bytes)} at least, {self.cached.short} to cache its "
                "PCE)")

    def warning(self, size: int) -> str | None:
        """Why a budget of `size` bytes that proves this kind never caches its PCE; None
        where it does (or where it is refused)."""
        if self.refusal(size) is not None or size >= self.cached.bytes:
            return None
        if size < self.extraction.bytes:
            why = (f"below {self.extraction.short} its PCE extraction never gets its "
                   "reservation")
        else:
            why = (f"its PCE extraction holds its {format_size(self.transient)} for the "
                   f"daemon's life and the PCE never fits beside it (under {self.cached.text})")
        return (f"cuzk proves {self.kind} without its PCE: {why}; give the daemon "
                f"{format_size(self.cached.bytes)} to cache it (cuzk's memory model, "
                "validate.proof_kind)")


@dataclass(frozen=True)
class BudgetRule:
    """The settings the rule reads (daemon.total_budget, daemon.safety_margin,
    validate.proof_kind, preflight.min_budget), as the playbook validated them."""

    total_budget: str
    safety_margin: str
    min_budget: str = "0"
    proof_kind: str | None = None

    @classmethod
    def of(cls, settings: Playbook) -> BudgetRule:
        """From a rendered playbook (its preflight and validate sections have defaults)."""
        daemon = settings.daemon
        return cls(str(daemon.total_budget), str(daemon.safety_margin),
                   str(settings.preflight.min_budget), settings.validation.proof_kind)

    def judge(self, size: int) -> tuple[str | None, str | None]:
        """Preflight's refusal of a budget of `size` bytes (after 'memory budget X is'), or
        its warning: cuzk's memory model for validate.proof_kind, and preflight.min_budget
        (named where it asks more than the model's floor)."""
        minimum = parse_size(self.min_budget)
        need = ProofNeed.of(self.proof_kind)
        floor = need.floor.bytes if need is not None else 0
        short = (f"below the minimum {format_size(minimum)} ({minimum} bytes) the proof "
                 "needs (preflight.min_budget)") if size < minimum else None
        refused = need.refusal(size) if need is not None else None
        if short is not None and (refused is None or minimum >= floor):
            return short, None
        if refused is not None:
            return refused, None
        return None, need.warning(size) if need is not None else None


@dataclass(frozen=True)
class Budget:
    """What the rule decided for one host.

    size: bytes the daemon may use (what the config step writes and the drain waits for);
    None where it cannot be sized. limit: the cgroup limit it was held against, None where
    the host shows none. refusal: why preflight refuses the host, None where it fits.
    warning: why a budget that fits still costs the host (cuzk proves without its PCE).
    """

    size: int | None
    limit: int | None
    refusal: str | None = None
    others: str = ""  # what the container's other processes hold, said for people
    warning: str | None = None

    @property
    def text(self) -> str:
        """The size as the daemon's config says it: whole MiB."""
        return f"{(self.size or 0) // 1024**2}MiB"

    def note(self) -> str:
        """Preflight's note for a budget that fits (WARNING first where it has one)."""
        if self.limit is None:
            said = (f"budget {format_size(self.size)} as set (daemon.total_budget; "
                    "the host shows no cgroup memory limit to hold it against)")
        else:
            said = f"budget {format_size(self.size)} fits{self.others}"
        if self.warning is None:
            return said
        return f"{WARNING}memory budget {format_size(self.size)} ({self.size} bytes): " \
               f"{self.warning}; {said}"


def neighbours_held(memory: MemoryFacts) -> int:
    """What the other processes hold, as the rule counts it: rounded up to NEIGHBOUR_GRAIN;
    0 where the host did not measure it."""
    held = memory.neighbours_bytes or 0
    return -(-held // NEIGHBOUR_GRAIN) * NEIGHBOUR_GRAIN


def others_text(memory: MemoryFacts) -> str:
    """'; other processes hold ...' naming the biggest, or "" where none were measured."""
    if memory.neighbours_bytes is None:
        return ""
    named = "; ".join(n.describe() for n in memory.neighbours[:3])
    return (f"; other processes hold {format_size(memory.neighbours_bytes)}, counted as "
            f"{format_size(neighbours_held(memory))}" + (f" ({named})" if named else ""))


def visible_limit(memory: MemoryFacts) -> int | None:
    """The container's cgroup memory limit in bytes, or None where the host shows none."""
    limit = memory.limit
    if not isinstance(limit, int) or isinstance(limit, bool):
        return None
    return limit if 0 < limit < HUGE_LIMIT else None


def no_limit_refusal(memory: MemoryFacts) -> str:
    if memory.limit is not None:
        seen = f"it reports {memory.limit} bytes"
    else:
        seen = f"{memory.source}: none set" if memory.source else "no memory cgroup found"
    return (
        f"the host shows no cgroup memory limit ({seen}), so daemon.total_budget \"cgroup\" "
        "cannot be sized: set daemon.total_budget to the daemon's budget (a size such as "
        "400GiB); the host's RAM (MemTotal) is never used for it"
    )


def _and_others(memory: MemoryFacts) -> str:
    return "" if memory.neighbours_bytes is None else " and what other processes hold"


def _margin_refusal(rule: BudgetRule, limit: int, memory: MemoryFacts) -> str:
    verb = "leaves" if memory.neighbours_bytes is None else "leave"
    return (f"safety margin {rule.safety_margin}{_and_others(memory)} {verb} no memory under "
            f"the limit {format_size(limit)}{others_text(memory)}")


def sized(memory: MemoryFacts, rule: BudgetRule) -> Budget:
    """The budget's size, before the minimum: total_budget, or the limit less the margin and
    what other processes hold."""
    limit = visible_limit(memory)
    others = others_text(memory)
    room = (None if limit is None
            else limit - parse_size(rule.safety_margin) - neighbours_held(memory))
    if rule.total_budget != CGROUP:
        size = parse_size(rule.total_budget)
        if limit is None or room is None:
            return Budget(size, None)
        if room <= 0:
            return Budget(size, limit, _margin_refusal(rule, limit, memory), others)
        if size > room:
            return Budget(size, limit, (
                f"total_budget {rule.total_budget} exceeds the cgroup limit minus the safety "
                f"margin{_and_others(memory)} ({format_size(room)}){others}"), others)
        return Budget(size, limit, None, others)
    if limit is None or room is None:
        return Budget(None, None, no_limit_refusal(memory))
    if room <= 0:
        return Budget(None, limit, _margin_refusal(rule, limit, memory), others)
    return Budget(room, limit, None, others)


def decide_budget(memory: MemoryFacts, rule: BudgetRule) -> Budget:
    """The rule in full: the size, and preflight's refusal (the least a proof needs
    included)."""
    budget = sized(memory, rule)
    if budget.refusal is not None or budget.size is None:
        return budget
    if budget.size < MIB:
        return replace(budget, refusal=(
            f"memory budget {budget.size} bytes is under 1 MiB: the daemon's config says it "
            "in whole MiB, so it would read 0MiB (raise the limit or daemon.total_budget)"
        ))
    refusal, warning = rule.judge(budget.size)
    if refusal is not None:
        return replace(budget, refusal=(
            f"memory budget {format_size(budget.size)} ({budget.size} bytes) is "
            f"{refusal}{budget.others}"
        ))
    return replace(budget, warning=warning)
