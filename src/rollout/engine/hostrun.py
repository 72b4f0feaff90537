"""One host of a batch, from its connection to its end: any guard left there first, one
read of its facts, its plan, then each step of the plan under its own guard's tether."""

from __future__ import annotations

from functools import partial

from rollout.engine.arming import Arming
from rollout.engine.failures import after_failure, warn
from rollout.engine.hostplan import (
    PHASE_AFTER,
    HostPlan,
    apply,
    digest_paths,
    phase_at_start,
    plan_gathered,
)
from rollout.engine.hosts import Hosts
from rollout.engine.options import EngineOptions
from rollout.engine.outcome import HostOutcome, host_end, park
from rollout.engine.runlocks import RunLocks
from rollout.engine.staging import Stager
from rollout.engine.stepper import StepRunner
from rollout.errors import RolloutError
from rollout.failures import host_status
from rollout.host.facts import HostFacts
from rollout.secrets import head
from rollout.steps.base import HostContext
from rollout.steps.decision import Release, Skip
from rollout.steps.work import uncordon_at_end


class HostRun:
    def __init__(self, hosts: Hosts, steps: StepRunner, locks: RunLocks,
                 options: EngineOptions) -> None:
        self.hosts = hosts
        self.bus = hosts.bus
        self.steps = steps
        self.locks = locks
        self.options = options

    def __call__(self, name: str, release: Release, stager: Stager | None) -> HostOutcome:
        unlocked = self.locks.not_locked(name)
        if unlocked is not None:
            return self._end(unlocked)
        held = self.locks.transport(name)
        try:  # the lock's connection when there is one: no second handshake per host
            transport = held if held is not None else self.hosts.connect(name)
        except RolloutError as e:  # by its kind: the network's or this side's (a key file)
            return self._end(HostOutcome(name, host_status(e.kind), str(e), kind=e.kind))
        ctx = self.hosts.context(name, transport, release)
        ctx.state.staged = stager.take(name) if stager else None
        arming = Arming(self.hosts.plan.run_id, self.locks, ctx)
        try:
            return self._run(ctx, release, arming)
        except RolloutError as e:  # a dropped connection between steps, a lock we lost
            return self._end(HostOutcome(name, "failed", f"{e}{arming.given()}", kind=e.kind))
        except Exception as e:  # noqa: BLE001 - one host's answers never end the whole run
            return self._end(HostOutcome(name, "failed", f"rollout could not take what this "
                                         f"host answered ({type(e).__name__}: {head(str(e), 300)})"
                                         f"{arming.given()}"))
        finally:
            arming.close()
            if held is None:  # the lock's connection closes when the lock is given back
                transport.close()

    def _run(self, ctx: HostContext, release: Release, arming: Arming) -> HostOutcome:
        done = ctx.name in self.options.done_hosts  # resumed: validated by this run
        if not done:
            arming.clear_left()  # no guard at the host, and what guards did shown
        if self.options.target is not None:
            ctx.release = self.options.target(ctx)
        facts = ctx.facts(*digest_paths(ctx.target))  # one read; every decision uses it
        if done and _still_validated(facts, ctx.release):
            return self._end(HostOutcome(
                ctx.name, "validated",
                f"already validated on release {release.id} by this run (resumed)", release.id))
        if done:  # to be touched again: the guards first, then the host as they left it
            arming.clear_left()
            facts = ctx.facts(*digest_paths(ctx.target))
        specs = self.options.host_steps or self.hosts.plan.host_steps
        plan = plan_gathered(ctx, specs, facts, self.hosts.where)
        ctx.state.facts = plan.facts  # and the first action, if nothing acted before it
        arming.prepare(plan)
        try:
            outcome = self._steps(ctx, plan, arming)
        finally:  # never left cordoned; before the guard settles, so that it still would
            if not arming.lost:
                uncordon_at_end(ctx)
        arming.settle()
        return outcome

    def _steps(self, ctx: HostContext, plan: HostPlan, arming: Arming) -> HostOutcome:
        steps: dict[str, str] = {}
        warnings: list[str] = []
        for step in plan.steps:
            if isinstance(step.decision, Skip) and step.by_when:
                self.steps.skip(ctx.name, step.spec, step.decision.reason)
                continue
            state = ctx.state
            state.phase = phase_at_start(state.phase, step.kind, step.decision)
            arming.follow(plan, state.phase)  # armed before the host leaves untouched
            park(self.bus, f"park-before-{step.kind}", ctx.name)
            result = self.steps.run(ctx, step.spec, partial(apply, ctx, step.kind, step.decision))
            steps[step.spec.name] = result.status.value
            if arming.lost:
                return self._end(HostOutcome(ctx.name, "failed", arming.handed_over(), None, steps))
            if not result.failed:
                state.phase = PHASE_AFTER.get(step.kind, state.phase)
                arming.follow(plan, state.phase)
            park(self.bus, f"park-after-{step.kind}")
            if not result.failed:
                continue
            rollback = plan.rollback_at(state.phase, step.kind)
            if not rollback.warning:
                return after_failure(self.bus, ctx, step.kind, result, rollback, steps,
                                     self.steps.run)
            warnings.append(warn(self.bus, ctx, step.kind, result))
        return self._end(_validated(ctx, plan, steps, warnings))

    def _end(self, outcome: HostOutcome) -> HostOutcome:
        return host_end(self.bus, outcome)


def _validated(ctx: HostContext, plan: HostPlan, steps: dict[str, str],
               warnings: list[str]) -> HostOutcome:
    assert ctx.release is not None
    reason = f"running release {ctx.release.id}, validation passed"
    if any(isinstance(s.decision, Skip) and "evidence" in s.decision.data
           for s in plan.steps if s.kind == "validate"):
        reason += " (earlier, by this same daemon: it was not restarted)"
    return HostOutcome(ctx.name, "validated", "; ".join([reason, *warnings]), ctx.release.id,
                       steps)


def _still_validated(facts: HostFacts, release: Release | None) -> bool:
    """A resumed run: the host still serves the release this run validated there."""
    return bool(
        release
        and facts.current_release == release.id
        and facts.daemon.running
        and not facts.held
    )
