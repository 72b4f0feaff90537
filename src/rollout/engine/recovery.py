"""Per-host automatic rollback: apply a RollbackPlan (rollout.engine.hostplan), decided from the
phase the host reached: back to the release it had, started and validated."""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import partial

from rollout.config.steps import (
    DrainParams,
    ReadyParams,
    RetryPolicy,
    StartParams,
    StopParams,
    ValidateParams,
)
from rollout.engine.hostplan import RollbackPlan
from rollout.engine.stepper import RunStep
from rollout.host.facts import HostFacts
from rollout.steps import HOST_STEPS
from rollout.steps.base import HostContext
from rollout.steps.config import restore_config_of
from rollout.steps.current import current_release, point_current_at
from rollout.steps.daemon import stop_action
from rollout.steps.decision import Action
from rollout.steps.drain import drain_action
from rollout.steps.validate import ValidateFor


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


def rollback_action(ctx: HostContext, kind: str, to: str | None = None) -> Action:
    """The action of one rollback step: stop forced, the rest with the playbook's settings;
    validate proves release `to` (where given) with that release's own command."""
    target = ctx.target
    if kind == "stop":
        return stop_action(HostFacts(), target, StopParams(force=True, work=False))
    if kind == "drain":  # the budget rule's figure, from the host's memory facts
        return drain_action(target, DrainParams(), (ctx.state.facts or ctx.facts()).memory)
    params: dict[str, StartParams | ReadyParams | ValidateParams] = {
        "start": StartParams(), "ready": ReadyParams(), "validate": ValidateParams()
    }
    return Action(f"rollback {kind}", params[kind], ValidateFor(to) if to else None)


def roll_back_host(ctx: HostContext, plan: RollbackPlan, run_step: RunStep) -> RollbackResult:
    if not plan.kinds:
        return RollbackResult(False, plan.outcome, plan.release)
    if "drain" not in plan.kinds and plan.rolled_back:
        ctx.log(
            "drain failed (deadline or plateau): restarting the previous release "
            "without waiting again (its memory is still charged)"
        )
    for kind in plan.kinds:
        if kind == "switch":  # current back at plan.to, with its config: no step of its own
            if plan.to:
                _restore(ctx, plan.to)
            continue
        spec = RollbackStep(f"rollback-{kind}", kind, timeout=_timeout(ctx, kind))
        _, act = HOST_STEPS[kind]
        result = run_step(ctx, spec, partial(act, ctx, rollback_action(ctx, kind, plan.to)))
        if result.failed:
            return RollbackResult(
                False, f"ROLLBACK FAILED at {kind}: {result.reason}", current_release(ctx)
            )
    if not plan.rolled_back:
        return RollbackResult(False, plan.outcome, current_release(ctx))
    return RollbackResult(True, plan.outcome, plan.to)


def _restore(ctx: HostContext, release_id: str) -> None:
    """Point current back at `release_id` and bring back the config it ran with."""
    if current_release(ctx) != release_id:
        point_current_at(ctx, release_id)
    if restore_config_of(ctx, release_id):
        ctx.log(f"restored the config {release_id} ran with")


def _timeout(ctx: HostContext, kind: str) -> float | None:
    daemon = ctx.settings.daemon
    return {
        "drain": float(daemon.drain.deadline) + 60,
        "ready": float(daemon.ready_timeout) + 30,
    }.get(kind)
