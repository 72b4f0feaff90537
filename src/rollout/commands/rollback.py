"""`rollout rollback`: take the fleet back to an earlier release already on its hosts, with
the same batches, locks, drain and validation as a rollout."""

from __future__ import annotations

import threading
from typing import Any

from rollout.commands.app import RolloutRequest, interrupts, json_stream, load_plan, make_bus
from rollout.commands.fleet import cache_dir, connect, step_spec
from rollout.config.steps import StepSpec
from rollout.engine.locks import LockPolicy, holder_for
from rollout.engine.run import Engine, EngineOptions, RunSummary
from rollout.errors import StepFailed, UserError
from rollout.host.layout import is_release_id
from rollout.output.console import print_summary
from rollout.steps.base import HostContext, Release
from rollout.steps.current import current_release, recorded_previous
from rollout.steps.kinds import KINDS
from rollout.steps.manifest import read_release

ROLLBACK_STEPS = tuple(name for name, kind in KINDS.items()
                       if kind.undo is not None or kind.checks_changes)
"""`rollout rollback`'s host steps, in the standard order: the kinds a rollback undoes, and
the check before them (Kind.checks_changes)."""


def target_for(to: str | None) -> Any:
    """Each host's target: `to`, else the release current pointed at before the last switch.
    A host already on `to` is left as it is: its plan skips stop, drain, switch and start
    (and validate, where this daemon already passed it), and it ends validated on `to`."""

    def resolve(ctx: HostContext) -> Release:
        on = current_release(ctx)
        if to is not None and to == on:
            if ctx.emit is not None:
                ctx.emit("note", reason=f"already on release {to}: left as it is")
            return read_release(ctx, to)
        release_id = to or recorded_previous(ctx)
        if not release_id or release_id == on:
            raise StepFailed(f"{ctx.name} has no earlier release to go back to", retryable=False)
        return read_release(ctx, release_id)

    return resolve


def _rollback_spec(plan: Any, kind: str) -> StepSpec:
    """The playbook's step, with what the kind adds in a rollback (Kind.rollback_params: the
    switch back also brings back the config that release ran with)."""
    spec = step_spec(plan, kind)
    extra = KINDS[kind].rollback_params
    return spec.model_copy(update={"params": {**spec.params, **extra}}) if extra else spec


def run_fleet_rollback(req: RolloutRequest, to: str | None) -> RunSummary:
    if to is not None and not is_release_id(to):
        raise UserError(f"--to {to!r} is not a release id (letters, digits, ._-; no ..)")
    plan = load_plan(req)
    holder = holder_for(plan.run_id, plan.operator, plan.controller, f"rollback:{to or 'previous'}")
    options = EngineOptions(
        holder,
        LockPolicy(req.lock_wait, req.break_lock, plan.playbook.rolling.lock_stale_after),
        interrupted=threading.Event(),
        target=target_for(to),
        host_steps=[_rollback_spec(plan, kind) for kind in ROLLBACK_STEPS],
    )
    with (
        json_stream(req.json_path) as stream,
        interrupts(options.interrupted),
    ):
        bus = make_bus(plan, stream, req.verbose, req.outputs)
        summary = Engine(plan, bus, connect, cache_dir(), options).run({"rollback_to": to})
    print_summary(summary, command="rollback")
    return summary
