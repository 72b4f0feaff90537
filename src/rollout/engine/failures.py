"""What a host's failed step leads to: a refusal that left the host untouched, a warning
(the host had validated), or the rollback of the phase it reached (rollout.engine.recovery)."""

from __future__ import annotations

from rollout.engine.hostplan import RollbackPlan
from rollout.engine.outcome import HostOutcome, host_end, park
from rollout.engine.recovery import roll_back_host
from rollout.engine.stepper import RunStep
from rollout.output.events import EventBus, StepResult
from rollout.steps.base import HostContext
from rollout.steps.decision import Phase
from rollout.steps.kinds import KINDS


def warn(bus: EventBus, ctx: HostContext, kind: str, result: StepResult) -> str:
    """A step after validation failed: the host serves the new release; say so loudly."""
    warning = f"WARNING: {kind} failed after validation: {result.reason}"
    bus.emit("warning", host=ctx.name, reason=warning, data={"step": kind})
    return warning


def after_failure(
    bus: EventBus,
    ctx: HostContext,
    kind: str,
    result: StepResult,
    rollback: RollbackPlan,
    steps: dict[str, str],
    run_step: RunStep,
) -> HostOutcome:
    """The host's end after step `kind` failed: untouched by a refused preflight, else its
    rollback run, and the host's outcome said."""
    cause = f"{kind} failed: {result.reason}"
    checks = KINDS.get(kind)
    if checks is not None and checks.checks_changes and ctx.state.phase is Phase.UNTOUCHED:
        outcome = HostOutcome(ctx.name, "skipped", f"{cause}; host untouched", None, steps)
        return host_end(bus, outcome, cause)
    if result.data.get("busy") is True and ctx.state.phase is Phase.UNTOUCHED:
        outcome = HostOutcome(ctx.name, "skipped", f"skipped: {result.reason}", None, steps,
                              busy=True)  # work in flight at the deadline (work.at_deadline)
        return host_end(bus, outcome, result.reason)
    park(bus, "park-before-rollback")
    rolled = roll_back_host(ctx, rollback, run_step)
    status = "rolled_back" if rolled.ok else "failed"
    outcome = HostOutcome(ctx.name, status, f"{cause}; {rolled.reason}", rolled.release, steps)
    return host_end(bus, outcome, cause)
