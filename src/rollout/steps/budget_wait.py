"""A validation proof whose job waits for cuzk's memory budget fails fast, with that cause
(issue 17), not at validate.timeout.

cuzk registers a proof's job in /status `pipelines` once its SRS is in the budget, its
partitions "pending"; each partition then waits in `budget.acquire` for one partition's
working set (curio extern/cuzk/cuzk-core/src/engine.rs, memory.rs). ops.prove reads /status
on the host while the proof runs and stops the proof once its job has waited
validate.budget_wait s with other work holding budget, at once where nothing could release
any (budget_waiting there). This module says what the host is given (`watch_for`) and
turns what it reports (parsed as hostile data in host/reports.py: BudgetWait) into the
step's failure: the figures and what to do.
"""

from __future__ import annotations

from rollout.config.params_manifest import kind as proof_kind
from rollout.config.playbook import Playbook
from rollout.errors import StepFailed
from rollout.host.reports import BudgetWait, Job
from rollout.jsontypes import JSON
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


def _held(wait: BudgetWait) -> str:
    """Who holds the budget, for the message."""
    jobs = "; ".join(j.describe() for j in wait.others[:MAX_NAMED])
    more = len(wait.others) - MAX_NAMED
    jobs += f"; and {more} more" if more > 0 else ""
    rest = max(0, wait.used - wait.pinned)
    return (f"reserved {format_size(wait.used)} ({wait.used} bytes): SRS and PCE "
            f"{format_size(wait.pinned)}, the rest {format_size(rest)} by "
            + (f"the jobs in flight: {jobs}" if jobs else "work /status names no job for"))


def _data(wait: BudgetWait, kind: str | None) -> dict[str, JSON]:
    """The figures, for the step's event."""
    need = ProofNeed.of(kind)
    return {"budget_wait": True, "waited": wait.waited, "budget_wait_limit": wait.limit,
            "proof_kind": kind, "job": wait.job.data(), "budget_total": wait.total,
            "budget_used": wait.used, "budget_available": wait.available,
            "srs_pce_bytes": wait.pinned, "partition_need": wait.partition,
            "proof_need": need.bytes if need is not None else None,
            "releasable": wait.releasable, "holders": [j.data() for j in wait.others]}


def _pending(job: Job) -> int:
    counted = job.partitions
    return 0 if counted is None else counted.total - counted.done


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
        f"validation stopped {when}: its proof's job {wait.job.id} waits for cuzk's "
        f"memory budget ({_pending(wait.job)} partitions pending). The budget "
        f"{format_size(wait.total)} ({wait.total} bytes) has {format_size(wait.available)} "
        f"free; {_needs(wait, kind)}; {_held(wait)}. To do: {todo}",
        retryable=False,
        output=output,
        data=_data(wait, kind),
    )
