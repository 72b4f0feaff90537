"""Per-host automatic rollback: apply a RollbackPlan (rollout.engine.hostplan), decided from the
phase the host reached: back to the release it had, started and validated."""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import partial

from rollout.config.steps import RetryPolicy
from rollout.engine.hostplan import RollbackPlan, apply
from rollout.engine.stepper import RunStep
from rollout.steps.base import HostContext
from rollout.steps.current import current_release
from rollout.steps.kinds import KINDS, UNDONE


@dataclass(frozen=True)
class RollbackStep:
    """One step of a rollback, run once (a rollback step is never retried)."""

    name: str
    kind: str
    timeout: float | None = None
    retry: RetryPolicy = field(default_factory=RetryPolicy)  # one attempt


@dataclass(frozen=True)
class RollbackResult:
    ok: bool
    reason: str
    release: str | None


def roll_back_host(ctx: HostContext, plan: RollbackPlan, run_step: RunStep) -> RollbackResult:
    """Each rollback step's action (HostPlan.rollback_at: the guard's recipe carries the same
    calls), in order; the first that fails ends the rollback."""
    if not plan.kinds:
        return RollbackResult(False, plan.outcome, plan.release)
    for skipped in (k for k in UNDONE if k not in plan.kinds and plan.rolled_back):
        ctx.log(KINDS[skipped].not_redone)  # its own failure: its undo is not run again
    for kind, action in zip(plan.kinds, plan.actions, strict=True):
        spec = RollbackStep(f"rollback-{kind}", kind, timeout=_timeout(ctx, kind))
        result = run_step(ctx, spec, partial(apply, ctx, kind, action))
        if result.failed:
            return RollbackResult(
                False, f"ROLLBACK FAILED at {kind}: {result.reason}", current_release(ctx)
            )
    if not plan.rolled_back:
        return RollbackResult(False, plan.outcome, current_release(ctx))
    return RollbackResult(True, plan.outcome, plan.to)


def _timeout(ctx: HostContext, kind: str) -> float | None:
    """The seconds the kind's undo may take (Kind.undo_seconds), from the host's settings."""
    seconds = KINDS[kind].undo_seconds
    return seconds(ctx.settings) if seconds is not None else None
