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
- Either way, a budget below the least one proof of validate.proof_kind needs (cuzk's
  memory model: the kind's figures in resources/params/kinds.yaml) or below
  preflight.min_budget is refused before anything is stopped, naming the figures, and so is
  one under 1 MiB (the config says it in whole MiB).

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
MIB = 1 << 20  # the config says the budget in whole MiB
NEIGHBOUR_GRAIN = 64 * MIB  # what other processes hold, rounded up to this


@dataclass(frozen=True)
class ProofNeed:
    """The least budget one proof of a kind needs in cuzk's memory model (curio's
    extern/cuzk/cuzk-core/src): the SRS, reserved whole before the proof runs
    (engine.rs: budget.acquire(srs_file_size) when it is not loaded; srs_manager.rs), and
    one partition's working set (memory.rs proof_kind_full_bytes) times the partitions one
    proof must hold at once to go on. cuzk acquires a partition's reservation one partition
    at a time (engine.rs's dispatcher, and one such figure for a whole single-sector proof
    on its monolithic path), so 1; a budget that cannot hold this blocks acquire() forever."""

    srs: int  # the .params file's size: SrsManager reserves exactly that
    partition: int
    partitions: int = 1

    @property
    def bytes(self) -> int:
        return self.srs + self.partition * self.partitions

    @classmethod
    def of(cls, kind: str | None) -> ProofNeed | None:
        """The figures of the kind `kind` in the shipped table; None without a kind or
        where the table has no figure for it."""
        if kind is None:
            return None
        row = proof_kind(kind)
        if row.srs is None or row.partition is None:
            return None
        return cls(srs=row.srs, partition=row.partition, partitions=row.partitions)

    def explain(self, kind: str) -> str:
        """What the figure is made of, after 'is below ...'."""
        return (f"the {format_size(self.bytes)} ({self.bytes} bytes) one {kind} proof needs: "
                f"its SRS {format_size(self.srs)} + {self.partitions} partition x "
                f"{format_size(self.partition)} (cuzk's memory model; validate.proof_kind)")


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

    def least(self) -> tuple[int, str]:
        """The least budget a host must have, and what that figure is, for 'is below ...'."""
        minimum = parse_size(self.min_budget)
        need = ProofNeed.of(self.proof_kind)
        if need is not None and self.proof_kind is not None and need.bytes >= minimum:
            return need.bytes, need.explain(self.proof_kind)
        return minimum, (f"the minimum {format_size(minimum)} ({minimum} bytes) the proof "
                         "needs (preflight.min_budget)")


@dataclass(frozen=True)
class Budget:
    """What the rule decided for one host.

    size: bytes the daemon may use (what the config step writes and the drain waits for);
    None where it cannot be sized. limit: the cgroup limit it was held against, None where
    the host shows none. refusal: why preflight refuses the host, None where it fits.
    """

    size: int | None
    limit: int | None
    refusal: str | None = None
    others: str = ""  # what the container's other processes hold, said for people

    @property
    def text(self) -> str:
        """The size as the daemon's config says it: whole MiB."""
        return f"{(self.size or 0) // 1024**2}MiB"

    def note(self) -> str:
        """Preflight's note for a budget that fits."""
        if self.limit is None:
            return (f"budget {format_size(self.size)} as set (daemon.total_budget; "
                    "the host shows no cgroup memory limit to hold it against)")
        return f"budget {format_size(self.size)} fits{self.others}"


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
    least, why = rule.least()
    if budget.size < least:
        return replace(budget, refusal=(
            f"memory budget {format_size(budget.size)} ({budget.size} bytes) is below "
            f"{why}{budget.others}"
        ))
    return budget
