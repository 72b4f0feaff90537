"""Single steps on one host, outside a rollout (`rollout drain HOST`, `heal`...): under that
host's lock like a rollout, any guard left there waited for and shown first, each step
decided from one read of the host's facts, the first failure ending them."""

from __future__ import annotations

from functools import partial

from rollout.config.steps import StepSpec
from rollout.engine.guard import guards_left
from rollout.engine.hostplan import apply, plan_gathered
from rollout.engine.hosts import Hosts
from rollout.engine.outcome import HostOutcome
from rollout.engine.runlocks import RunLocks
from rollout.engine.stepper import StepRunner
from rollout.output.events import Status, StepResult
from rollout.steps.base import HostContext
from rollout.steps.work import uncordon_at_end


def run_steps_on(hosts: Hosts, locks: RunLocks, steps: StepRunner, name: str,
                 specs: list[StepSpec]) -> list[StepResult]:
    with locks.held():
        unlocked = locks.not_locked(name)
        if unlocked is not None:  # the lock was not taken: nothing is done there
            return [_not_run(hosts, name, specs, unlocked)]
        return _steps_on(hosts, steps, name, specs)


def _not_run(hosts: Hosts, name: str, specs: list[StepSpec], why: HostOutcome) -> StepResult:
    """The first step, failed before it began: this run does not hold the host's lock."""
    spec = specs[0]
    result = StepResult(Status.FAILED, f"not locked, nothing done: {why.reason}",
                        {"failure": "not-locked"})
    bus = hosts.bus
    bus.emit("step_start", host=name, step=spec.name, data={"kind": str(spec.kind)})
    bus.emit("step_end", host=name, step=spec.name, status=result.status.value,
             reason=result.reason, data={**result.data, "attempts": 0, "duration": 0.0})
    return result


def _steps_on(hosts: Hosts, steps: StepRunner, name: str,
              specs: list[StepSpec]) -> list[StepResult]:
    transport = hosts.connect(name)
    ctx = hosts.context(name, transport, None)
    results: list[StepResult] = []
    try:
        guards_left(ctx, hosts.bus, hosts.plan.run_id)  # none at the host, and shown
        plan = plan_gathered(ctx, specs, where=hosts.where)
        # a cordon an earlier run left (its record on the host) is undone at the end of a
        # stop, or once the daemon serves (start, heal: ready)
        ctx.state.cordoned = plan.facts.cordoned is not None and any(
            s.kind in ("stop", "ready") for s in specs)
        for step in plan.steps:
            results.append(steps.run(ctx, step.spec, partial(apply, ctx, step.kind,
                                                               step.decision)))
            if results[-1].failed:
                break
    finally:
        try:
            if _stopped_by(specs, results):
                _leave_cordoned(hosts, ctx, name)
            else:
                uncordon_at_end(ctx)  # failed, skipped as busy, or serving again
        finally:
            transport.close()
    return results


def _stopped_by(specs: list[StepSpec], results: list[StepResult]) -> bool:
    """A single stop or drain that ended with the daemon stopped on purpose (every step
    passed, and none of them starts it again)."""
    kinds = {str(s.kind) for s in specs}
    return (bool(results) and "stop" in kinds and not kinds & {"start", "ready"}
            and not any(r.failed for r in results))


def _leave_cordoned(hosts: Hosts, ctx: HostContext, name: str) -> None:
    """The operator stopped the prover: curio must not send it work. The cordon stays
    (recorded on the host: `status` shows it) with the hold; `rollout start` undoes both
    (`heal` leaves a held host held, and so cordoned)."""
    if ctx.state.cordoned:
        hosts.bus.emit("note", host=name, reason=(
            f"left cordoned: this command stopped the daemon; `rollout start {name}` "
            "starts it and uncordons the host (`rollout heal` leaves a held host held "
            "and cordoned)"))
