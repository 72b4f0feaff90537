"""A validation proof whose job waits for cuzk's memory budget fails fast, with that cause
(issue 17), not at validate.timeout.

cuzk registers a proof's job in /status `pipelines` once its SRS is in the budget, its
partitions "pending"; each partition then waits in `budget.acquire` for one partition's
working set (curio extern/cuzk/cuzk-core/src/engine.rs, memory.rs). ops.prove reads /status
on the host while the proof runs and stops the proof once its job has waited
validate.budget_wait s with other work holding budget, at once where nothing could release
any (budget_waiting there). This module says what the host is given (`watch_for`) and
turns what it reports, hostile data, into the step's failure: the figures and what to do.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from rollout.config.params_manifest import kind as proof_kind
from rollout.config.playbook import Playbook
from rollout.errors import StepFailed
from rollout.steps.budget import ProofNeed
from rollout.units import format_size

MAX_NAMED = 5  # jobs named in the message; the data keeps up to 32


def watch_for(settings: Playbook) -> dict[str, float] | None:
    """What ops.prove watches with: one partition of validate.proof_kind (kinds.yaml) and
    validate.budget_wait; None (no watch) for a kind with no partition figure."""
    kind = settings.validation.proof_kind
    partition = proof_kind(kind).partition if kind is not None else None
    if partition is None:
        return None
    return {"partition": float(partition), "wait": float(settings.validation.budget_wait)}


def _count(value: Any) -> int | None:
    if isinstance(value, bool) or not isinstance(value, int):
        return None
    return value if 0 <= value < (1 << 60) else None


def _seconds(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value) if 0 <= value < 1e9 else None


def _text(value: Any, limit: int) -> str:
    """A host's string, printable and bounded (a job id is data, never markup)."""
    text = value if isinstance(value, str) else "?"
    return "".join(c if c.isprintable() else "?" for c in text[:limit]) or "?"


@dataclass(frozen=True)
class Job:
    """One job /status listed: cuzk's proof kind, its id, its age and its partitions."""

    job_id: str
    kind: str
    age: float | None
    active: int
    done: int
    total: int

    @classmethod
    def parse(cls, doc: Any) -> Job | None:
        if not isinstance(doc, dict):
            return None
        return cls(_text(doc.get("job_id"), 80), _text(doc.get("kind"), 40),
                   _seconds(doc.get("age")), _count(doc.get("active")) or 0,
                   _count(doc.get("done")) or 0, _count(doc.get("total")) or 0)

    @property
    def text(self) -> str:
        age = "?" if self.age is None else f"{self.age:g} s"
        return (f"{self.kind} {self.job_id} (running {age}, {self.done}/{self.total} "
                f"partitions done, {self.active} in flight)")

    def data(self) -> dict[str, Any]:
        return {"job_id": self.job_id, "kind": self.kind, "age": self.age,
                "active": self.active, "done": self.done, "total": self.total}


@dataclass(frozen=True)
class BudgetWait:
    """What ops.prove reported when it stopped a proof that waited for budget."""

    job: Job
    others: tuple[Job, ...]
    total: int
    used: int
    available: int
    pinned: int  # bytes of the SRS and PCE allocations
    partition: int  # what one partition of the kind needs
    releasable: bool
    waited: float
    limit: float

    @classmethod
    def parse(cls, doc: Any) -> BudgetWait | None:
        """The host's budget_wait block; None where it is not one (no figure is guessed)."""
        if not isinstance(doc, dict):
            return None
        job = Job.parse(doc.get("job"))
        listed = doc.get("others")
        others = tuple(j for j in (Job.parse(o) for o in (
            listed[:32] if isinstance(listed, list) else [])) if j is not None)
        figures = [_count(doc.get(k)) for k in (
            "total", "used", "available", "pinned", "partition")]
        waited, limit = _seconds(doc.get("waited")), _seconds(doc.get("limit"))
        if job is None or waited is None or limit is None or None in figures:
            return None
        total, used, available, pinned, partition = (int(f or 0) for f in figures)
        return cls(job, others, total, used, available, pinned, partition,
                   doc.get("releasable") is True, waited, limit)

    def held(self) -> str:
        """Who holds the budget, for the message."""
        jobs = "; ".join(j.text for j in self.others[:MAX_NAMED])
        more = len(self.others) - MAX_NAMED
        jobs += f"; and {more} more" if more > 0 else ""
        rest = max(0, self.used - self.pinned)
        return (f"reserved {format_size(self.used)} ({self.used} bytes): SRS and PCE "
                f"{format_size(self.pinned)}, the rest {format_size(rest)} by "
                + (f"the jobs in flight: {jobs}" if jobs else "work /status names no job for"))

    def data(self, kind: str | None) -> dict[str, Any]:
        need = ProofNeed.of(kind)
        return {"budget_wait": True, "waited": self.waited, "budget_wait_limit": self.limit,
                "proof_kind": kind, "job": self.job.data(), "budget_total": self.total,
                "budget_used": self.used, "budget_available": self.available,
                "srs_pce_bytes": self.pinned, "partition_need": self.partition,
                "proof_need": need.bytes if need is not None else None,
                "releasable": self.releasable, "holders": [j.data() for j in self.others]}


def _needs(wait: BudgetWait, kind: str | None) -> str:
    need = ProofNeed.of(kind)
    one = f"one {kind} partition needs {format_size(wait.partition)} ({wait.partition} bytes)"
    if need is None:
        return one
    return f"{one}; one {kind} proof needs {format_size(need.bytes)} ({need.bytes} bytes)"


def budget_wait_failure(wait: BudgetWait, kind: str | None, output: str) -> StepFailed:
    """The validation's failure: the cause with every figure, and what to do."""
    if wait.releasable:
        when = (f"after {wait.waited:g} s (validate.budget_wait {wait.limit:g} s) with other "
                "work holding the budget")
        todo = ("cordon the host (work.cordon) or let its work finish, then validate again; "
                "or give the daemon a larger budget (daemon.total_budget, the container's "
                "memory limit)")
    else:
        when = "at once: nothing holds budget that could be released"
        todo = "give the daemon a larger budget (daemon.total_budget, the container's memory limit)"
    return StepFailed(
        f"validation stopped {when}: its proof's job {wait.job.job_id} waits for cuzk's "
        f"memory budget ({wait.job.total - wait.job.done} partitions pending). The budget "
        f"{format_size(wait.total)} ({wait.total} bytes) has {format_size(wait.available)} "
        f"free; {_needs(wait, kind)}; {wait.held()}. To do: {todo}",
        retryable=False,
        output=output,
        data=wait.data(kind),
    )
