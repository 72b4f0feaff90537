"""A validation proof whose job waits for cuzk's memory budget fails fast, with that cause
(issue 17), not at validate.timeout.

cuzk registers a proof's job in /status `pipelines` once its SRS is in the budget, its
partitions "pending"; each partition then waits in `budget.acquire` for one partition's
working set (curio extern/cuzk/cuzk-core/src/engine.rs, memory.rs). ops.prove reads /status
on the host while the proof runs and stops the proof once its job has waited
validate.budget_wait s with other work holding budget, at once where nothing could release
any (budget_waiting there). Its job is known by its id, never by arrival order (issue 27):
cuzk-bench `single` cannot be given one and names it with a fresh UUID v4, which curio's
jobs never have (porep-<miner>-<sector>, ...), so the host follows the job of that form that
appeared since the proof was submitted (own_jobs; where another bench client submitted at
the same moment, it fires only once every such job waits). A client that names its own
jobs is not watched: validate.timeout bounds it. This module says what the host is given
(`watch_for`) and turns what it reports (parsed as hostile data in host/reports.py:
BudgetWait) into the step's failure: the figures and what to do.
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
    validate.budget_wait; None (no watch) without a kind."""
    kind = settings.validation.proof_kind
    if kind is None:
        return None
    return {"partition": float(proof_kind(kind).partition),
            "wait": float(settings.validation.budget_wait)}


def _held(wait: BudgetWait) -> str:
    """Who holds the budget, for the message."""
    jobs = "; ".join(j.describe() for j in wait.others[:MAX_NAMED])
    more = len(wait.others) - MAX_NAMED
    jobs += f"; and {more} more" if more > 0 else ""
    rest = max(0, wait.used - wait.pinned)
    return (f"reserved {format_size(wait.used)} ({wait.used} bytes): SRS and PCE "
            f"{format_size(wait.pinned)}, the rest {format_size(rest)} by "
            + (f"the jobs in flight: {jobs}" if jobs else "work /status names no job for"))


def _data(wait: BudgetWait, kind: str | None, too_small: str | None) -> dict[str, JSON]:
    """The figures, for the step's event."""
    need = ProofNeed.of(kind)
    return {"budget_wait": True, "waited": wait.waited, "budget_wait_limit": wait.limit,
            "proof_kind": kind, "job": wait.job.data(), "budget_total": wait.total,
            "budget_used": wait.used, "budget_available": wait.available,
            "srs_pce_bytes": wait.pinned, "partition_need": wait.partition,
            "proof_need": need.one_proof.bytes if need is not None else None,
            "daemon_floor": need.floor.bytes if need is not None else None,
            "pce_cached_need": need.cached.bytes if need is not None else None,
            "too_small": too_small is not None,
            "releasable": wait.releasable and too_small is None,
            "holders": [j.data() for j in wait.others]}


def _pending(job: Job) -> int:
    counted = job.partitions
    return 0 if counted is None else counted.total - counted.done


def _needs(wait: BudgetWait, kind: str | None) -> str:
    need = ProofNeed.of(kind)
    one = f"one {kind} partition needs {format_size(wait.partition)} ({wait.partition} bytes)"
    if need is None:
        return one
    return (f"{one}; one {kind} proof needs {need.one_proof.text}, a daemon that proves it "
            f"{format_size(need.floor.bytes)} (SRS + PCE extraction + one partition)")


def too_small(wait: BudgetWait, kind: str | None) -> str | None:
    """Why the daemon's whole budget never proves `kind` (preflight's rule), or None: then
    the wait is other work's, or a reservation that ends."""
    need = ProofNeed.of(kind)
    return need.refusal(wait.total) if need is not None else None


def budget_wait_failure(wait: BudgetWait, kind: str | None, output: str) -> StepFailed:
    """The validation's failure: the cause with every figure, and what to do. A budget too
    small for the kind is named so, whatever holds it: no cordon frees room there."""
    small = too_small(wait, kind)
    larger = "give the daemon a larger budget (daemon.total_budget, the container's memory limit)"
    if small is not None:
        when = f"after {wait.waited:g} s" if wait.releasable else "at once"
        todo = f"{larger}: the budget is {small}"
    elif wait.releasable:
        when = (f"after {wait.waited:g} s (validate.budget_wait {wait.limit:g} s) with other "
                "work holding the budget")
        todo = ("cordon the host (work.cordon) or let its work finish, then validate again; "
                "or give the daemon a larger budget (daemon.total_budget, the container's "
                "memory limit)")
    else:
        when = "at once: nothing holds budget that could be released"
        todo = larger
    return StepFailed(
        f"validation stopped {when}: its proof's job {wait.job.id} waits for cuzk's "
        f"memory budget ({_pending(wait.job)} partitions pending). The budget "
        f"{format_size(wait.total)} ({wait.total} bytes) has {format_size(wait.available)} "
        f"free; {_needs(wait, kind)}; {_held(wait)}. To do: {todo}",
        retryable=False,
        output=output,
        data=_data(wait, kind, small),
    )
