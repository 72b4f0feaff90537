"""Execute a plan: controller steps once, then hosts in batches, each host at its own pace."""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

from rollout import failpoints
from rollout.config.batches import max_fail_exceeded
from rollout.engine.guard import HostGuard, guards_left
from rollout.engine.hostplan import (
    PHASE_AFTER,
    HostPlan,
    RollbackPlan,
    apply,
    digest_paths,
    failure_reason,
    phase_at_start,
    plan_host,
)
from rollout.engine.locks import (
    FleetLocks,
    FoundLock,
    Holder,
    LockEvents,
    LockPolicy,
    as_dict,
    fleet_locks,
    lock_order,
)
from rollout.engine.plan import Plan
from rollout.engine.recovery import roll_back_host
from rollout.engine.retry import failure_class, run_with_retry
from rollout.engine.staging import Stager, staging
from rollout.errors import Location, LockHeld, RolloutError
from rollout.host.facts import HostFacts
from rollout.host.layout import Layout
from rollout.output.events import EventBus, Status, StepResult
from rollout.secrets import head, tail
from rollout.steps import image
from rollout.steps.base import HostContext
from rollout.steps.decision import Phase, Release, Skip
from rollout.transport.base import Transport

Connect = Callable[[Any], Transport]


@dataclass
class HostOutcome:
    host: str
    status: str  # validated, failed, rolled_back, skipped, locked, unreachable, not_started
    reason: str
    release: str | None = None
    steps: dict[str, str] = field(default_factory=dict)

    @property
    def succeeded(self) -> bool:
        return self.status == "validated"


@dataclass
class RunSummary:
    run_id: str
    outcomes: dict[str, HostOutcome]
    aborted: str | None = None
    release: Release | None = None
    dry_run: bool = False

    @property
    def exit_code(self) -> int:
        if self.dry_run:
            return 0
        ok = all(o.succeeded for o in self.outcomes.values())
        return 0 if ok and not self.aborted and self.outcomes else 1


@dataclass
class EngineOptions:
    holder: Holder | None = None  # who takes the host locks; None: no locks
    locks: LockPolicy = field(default_factory=LockPolicy)
    done_hosts: frozenset[str] = frozenset()  # a resumed run: hosts already validated
    interrupted: threading.Event = field(default_factory=threading.Event)
    # A fleet rollback: each host's release found on the host, and the steps to run.
    target: Callable[[HostContext], Release] | None = None
    host_steps: list[Any] | None = None
    # A release bundle built elsewhere (rollout.bundle): no build, no extract, no Docker.
    release: Release | None = None
    resumed: bool = False  # a resumed run (each command reports what the hosts' guards did)


DEFAULT_STEP_TIMEOUT = 900.0  # seconds; a step with no timeout of its own never hangs a run
PER_HOST = Release("per-host", "", "", ())


class Engine:
    def __init__(
        self,
        plan: Plan,
        bus: EventBus,
        connect: Connect,
        cache_dir: Path,
        options: EngineOptions | None = None,
    ) -> None:
        self.plan = plan
        self.bus = bus
        self.connect = connect
        self.cache_dir = cache_dir
        self.options = options or EngineOptions()
        self._locks: FleetLocks | None = None
        self._stager: Stager | None = None

    def run(self, request: dict[str, Any] | None = None) -> RunSummary:
        """Run the plan; a run_end event closes every run, even one cut short by a bug."""
        plan = self.plan
        self.bus.emit("run_start", data={**plan.describe(), "request": request or {}})
        summary = RunSummary(plan.run_id, {})
        try:
            with self._locks_held():
                self._locked_run(summary)
        except LockHeld as e:
            self.bus.emit("run_end", status="locked", reason=str(e), data={})
            raise
        except BaseException as e:
            summary.aborted = f"run cut short: {type(e).__name__}: {e}"
            self._run_end(summary)
            raise
        self._run_end(summary)
        return summary

    def _run_end(self, summary: RunSummary) -> None:
        refused = self._locks.refused if self._locks else {}
        for name in self.plan.host_names:  # one machine under two entries: why, even unreached
            if name in refused and name not in summary.outcomes:
                summary.outcomes[name] = self._end(HostOutcome(name, "failed", refused[name]))
            summary.outcomes.setdefault(
                name, HostOutcome(name, "not_started", summary.aborted or "not reached")
            )
        self.bus.emit(
            "run_end",
            status="ok" if summary.exit_code == 0 else "failed",
            reason=summary.aborted,
            data={n: o.__dict__ for n, o in summary.outcomes.items()},
        )

    def _locked_run(self, summary: RunSummary) -> None:
        summary.release = PER_HOST if self.options.target else self._controller_steps()
        if summary.release is None:
            summary.aborted = "controller steps failed"
        else:
            self._batches(summary.release, summary)
        if summary.aborted and self.plan.playbook.rolling.rollback_on_abort == "all":
            self._revert_done_hosts(summary)

    @contextlib.contextmanager
    def _locks_held(self) -> Iterator[None]:
        """Every host's lock, before the build and the first batch, held to the run's end."""
        holder = self.options.holder
        if holder is None:
            yield
            return
        names = [h.name for h in sorted(map(self.plan.host, self.plan.host_names), key=lock_order)]
        events = LockEvents(self._locks_taken, self._broke, self._lost, self._unlockable)
        with fleet_locks(names, self._open, holder, self.options.locks, events) as locks:
            self._locks = locks
            failpoints.park("park-after-locks", self._parked)
            try:
                yield
            finally:
                failpoints.park("park-before-unlock", self._parked)

    def _parked(self, name: str, go: str) -> None:
        self.bus.emit("parked", reason=f"failpoint {name}: parked until {go} exists",
                      data={"failpoint": name, "go": go})

    def _open(self, name: str) -> HostContext:
        return self._context(name, self.connect(self.plan.host(name)), None)

    def _locks_taken(self, hosts: list[str]) -> None:
        holder = self.options.holder
        self.bus.emit(
            "locks_taken",
            reason=f"{len(hosts)} host lock(s) taken; held to the end of the run",
            data={"hosts": hosts, "holder": as_dict(holder) if holder else {}},
        )

    def _lost(self, other: FoundLock) -> None:
        self.bus.emit(
            "lock_lost",
            host=other.host,
            reason=f"our lock was broken and taken by {other.describe()}: "
            "no step of this run starts there any more",
            data={"holder": as_dict(other.holder)},
        )

    def _unlockable(self, host: str, error: str) -> None:
        self.bus.emit("note", host=host, reason=f"not locked, left alone by this run: {error}")

    def _controller_steps(self) -> Release | None:
        given = self.options.release
        if given is not None:
            for spec in self.plan.controller_steps:
                self._emit_skip(None, spec, f"release {given.id} ({given.version}) comes from "
                                f"a bundle built elsewhere: nothing to build or extract")
            return given
        ctx = self.build()
        return None if ctx is None else ctx.release

    def build(self) -> image.ControllerContext | None:
        """The controller steps (build, extract) alone: what they made, None if one failed."""
        ctx = image.ControllerContext(self.plan.playbook.build, self.plan.version, self.cache_dir)
        for spec in self.plan.controller_steps:
            fn = image.build if spec.kind == "build" else image.extract
            result = self._run_step(None, spec, partial(fn, ctx, spec.params))
            if result.failed:
                return None
        return ctx

    def _batches(self, release: Release, summary: RunSummary) -> None:
        """The batches in order; meanwhile the later batches' hosts are staged ahead."""
        later = [h for batch in self.plan.batches[1:] for h in batch
                 if h not in self.options.done_hosts and self._not_locked(h) is None]  # fmt: skip
        with staging(release, self.bus, self._staging_host, later) as stager:
            self._stager = stager
            try:
                self._each_batch(release, summary)
            finally:
                self._stager = None

    @contextlib.contextmanager
    def _staging_host(self, name: str) -> Iterator[HostContext]:
        """A context for staging on a host: on its lock's connection when there is one."""
        held = self._locks.held.get(name) if self._locks else None
        transport = held.transport if held else self.connect(self.plan.host(name))
        try:
            yield self._context(name, transport, None)
        finally:
            if held is None:
                transport.close()

    def _each_batch(self, release: Release, summary: RunSummary) -> None:
        rolling = self.plan.playbook.rolling
        for index, batch in enumerate(self.plan.batches):
            if self.options.interrupted.is_set():
                summary.aborted = (
                    f"interrupted: no new hosts started; resume with "
                    f"`rollout rollout --resume {self.plan.run_id}`"
                )
                return
            self.bus.emit("batch_start", data={"index": index, "hosts": batch})
            with ThreadPoolExecutor(max_workers=max(1, len(batch))) as pool:
                outcomes = list(pool.map(lambda h: self._host(h, release), batch))
            for outcome in outcomes:
                summary.outcomes[outcome.host] = outcome
            failed = sum(1 for o in summary.outcomes.values() if not o.succeeded)
            if index == 0 and failed and len(self.plan.batches) > 1:
                summary.aborted = "canary batch failed: rollout stopped"
                return
            if max_fail_exceeded(failed, len(self.plan.host_names), rolling.max_fail_percentage):
                summary.aborted = (
                    f"{failed} failed host(s) exceed max_fail_percentage "
                    f"{rolling.max_fail_percentage}%"
                )
                return
            if rolling.pause_between_batches and index + 1 < len(self.plan.batches):
                time.sleep(float(rolling.pause_between_batches))

    def _context(self, name: str, transport: Transport, release: Release | None) -> HostContext:
        return HostContext(
            host=self.plan.host(name),
            transport=transport,
            layout=Layout(self.plan.root),
            settings=self.plan.settings_for(name),
            release=release,
            log=partial(self._note, name),
            emit=partial(self.bus.emit, host=name),
        )

    def _host(self, name: str, release: Release) -> HostOutcome:
        unlocked = self._not_locked(name)
        if unlocked is not None:
            return self._end(unlocked)
        held = self._locks.held.get(name) if self._locks else None
        try:  # the lock's connection when there is one: no second handshake per host
            transport = held.transport if held else self.connect(self.plan.host(name))
        except RolloutError as e:
            return self._end(HostOutcome(name, "unreachable", str(e)))
        ctx = self._context(name, transport, release)
        ctx.state.staged = self._stager.take(name) if self._stager else None
        guard = HostGuard(self.plan.run_id)
        ctx.tether = guard.check
        try:
            done = name in self.options.done_hosts  # resumed: validated by this run
            if not done:
                guards_left(ctx, self.bus, self.plan.run_id)  # none at the host, and shown
            if self.options.target is not None:
                ctx.release = self.options.target(ctx)
            facts = ctx.facts(*digest_paths(ctx.target))  # one read; every decision uses it
            if done and _still_validated(facts, ctx.release):
                return self._end(
                    HostOutcome(
                        name,
                        "validated",
                        f"already validated on release {release.id} by this run (resumed)",
                        release.id,
                    )
                )
            if done:  # to be touched again: the guards first, then the host as they left it
                guards_left(ctx, self.bus, self.plan.run_id)
                facts = ctx.facts(*digest_paths(ctx.target))
            ctx.state.facts = facts  # and the first action, if nothing acted before it
            specs = self.options.host_steps or self.plan.host_steps
            plan = plan_host(facts, ctx.target, specs, self._where)
            guard.prepare(ctx, plan)
            outcome = self._host_steps(ctx, plan, guard)
            guard.settle()
            return outcome
        except RolloutError as e:  # a dropped connection between steps, a lock we lost
            given = "; the host's guard takes over" if guard.stream and not guard.settled else ""
            return self._end(HostOutcome(name, "failed", f"{type(e).__name__}: {e}{given}"))
        except Exception as e:  # noqa: BLE001 - one host's answers never end the whole run
            given = "; the host's guard takes over" if guard.stream and not guard.settled else ""
            return self._end(HostOutcome(name, "failed", f"rollout could not take what this "
                                         f"host answered ({type(e).__name__}: {head(str(e), 300)})"
                                         f"{given}"))
        finally:
            if guard.drop() and self._locks is not None:  # the host's guard takes over:
                self._locks.keep(name)  # under this run's lock, which stays on the host
            if held is None:  # the lock's connection closes when the lock is given back
                transport.close()

    def _not_locked(self, name: str) -> HostOutcome | None:
        """A host this run does not hold the lock of is never touched."""
        locks = self._locks
        if locks is None:
            return None
        if name in locks.refused:  # one machine under two entries: neither is touched
            return HostOutcome(name, "failed", locks.refused[name])
        if name in locks.unreachable:
            return HostOutcome(name, "unreachable", locks.unreachable[name])
        if name in locks.lost:
            return HostOutcome(name, "locked", "its lock was broken by another run")
        return None

    def _broke(self, found: FoundLock) -> None:
        self.bus.emit(
            "lock_broken",
            host=found.host,
            reason=f"broke the lock of {found.describe()} (--break-lock)",
            data={"holder": as_dict(found.holder), "age": found.age},
        )

    def _host_steps(self, ctx: HostContext, plan: HostPlan, guard: HostGuard) -> HostOutcome:
        steps: dict[str, str] = {}
        warnings: list[str] = []
        assert ctx.release is not None
        for step in plan.steps:
            spec = step.spec
            if isinstance(step.decision, Skip) and step.by_when:
                self._emit_skip(ctx.name, spec, step.decision.reason)
                continue
            state = ctx.state
            state.phase = phase_at_start(state.phase, step.kind, step.decision)
            guard.follow(ctx, plan, state.phase)  # armed before the host leaves untouched
            result = self._run_step(ctx, spec, partial(apply, ctx, step.kind, step.decision))
            steps[spec.name] = result.status.value
            if guard.lost:
                return self._end(HostOutcome(ctx.name, "failed", guard.handed_over(), None, steps))
            if not result.failed:
                state.phase = PHASE_AFTER.get(step.kind, state.phase)
                guard.follow(ctx, plan, state.phase)
            failpoints.park(f"park-after-{step.kind}", self._parked)
            if not result.failed:
                continue
            rollback = plan.rollback_at(state.phase, step.kind)
            if not rollback.warning:
                return self._after_failure(ctx, step.kind, result, rollback, steps)
            warnings.append(self._warn(ctx, step.kind, result))
        reason = f"running release {ctx.release.id}, validation passed"
        if any(isinstance(s.decision, Skip) and "evidence" in s.decision.data
               for s in plan.steps if s.kind == "validate"):
            reason += " (earlier, by this same daemon: it was not restarted)"
        return self._end(
            HostOutcome(ctx.name, "validated", "; ".join([reason, *warnings]), ctx.release.id,
                        steps)
        )

    def _warn(self, ctx: HostContext, kind: str, result: StepResult) -> str:
        """A step after validation failed: the host serves the new release; say so loudly."""
        warning = f"WARNING: {kind} failed after validation: {result.reason}"
        self.bus.emit("warning", host=ctx.name, reason=warning, data={"step": kind})
        return warning

    def _where(self, spec: Any) -> Location | None:
        steps = self.plan.playbook.steps
        if spec not in steps:
            return None
        return self.plan.playbook.location("steps", steps.index(spec), "when")

    def _after_failure(
        self,
        ctx: HostContext,
        kind: str,
        result: StepResult,
        rollback: RollbackPlan,
        steps: dict[str, str],
    ) -> HostOutcome:
        cause = f"{kind} failed: {result.reason}"
        if kind == "preflight" and ctx.state.phase is Phase.UNTOUCHED:
            return self._end(
                HostOutcome(ctx.name, "skipped", f"{cause}; host untouched", None, steps), cause
            )
        failpoints.park("park-before-rollback", self._parked)
        rolled = roll_back_host(ctx, rollback, self._run_step)
        status = "rolled_back" if rolled.ok else "failed"
        return self._end(
            HostOutcome(ctx.name, status, f"{cause}; {rolled.reason}", rolled.release, steps), cause
        )

    def _end(self, outcome: HostOutcome, cause: str | None = None) -> HostOutcome:
        self.bus.emit(
            "host_end",
            host=outcome.host,
            status=outcome.status,
            reason=outcome.reason,
            data={"release": outcome.release, "cause": cause},
        )
        return outcome

    def _revert_done_hosts(self, summary: RunSummary) -> None:
        """rollback_on_abort: all: hosts that reached the new release go back too."""
        for outcome in list(summary.outcomes.values()):
            if outcome.succeeded:
                summary.outcomes[outcome.host] = self._end(self._revert(outcome, summary))

    def _revert(self, outcome: HostOutcome, summary: RunSummary) -> HostOutcome:
        try:
            transport = self.connect(self.plan.host(outcome.host))
        except RolloutError as e:
            return HostOutcome(
                outcome.host,
                "failed",
                f"revert after abort: unreachable: {e}",
                outcome.release,
                outcome.steps,
            )
        try:
            ctx = self._context(outcome.host, transport, summary.release)
            plan = plan_host(ctx.facts(), ctx.target, [])
            ctx.state.phase = Phase.VALIDATED  # the host validated the release in this run
            rolled = roll_back_host(ctx, plan.rollback_at(ctx.state.phase, None), self._run_step)
            status = "rolled_back" if rolled.ok else "failed"
            return HostOutcome(outcome.host, status, rolled.reason, rolled.release, outcome.steps)
        except RolloutError as e:
            return HostOutcome(
                outcome.host, "failed", f"revert after abort: {e}", outcome.release, outcome.steps
            )
        finally:
            transport.close()

    def run_steps_on(self, name: str, specs: list[Any]) -> list[StepResult]:
        """Run some steps on one host, outside a rollout (the single-step commands), under
        that host's lock like a rollout."""
        with self._locks_held():
            unlocked = self._not_locked(name)
            if unlocked is not None:  # the lock was not taken: nothing is done there
                return [self._not_run(name, specs, unlocked)]
            return self._steps_on(name, specs)

    def _not_run(self, name: str, specs: list[Any], why: HostOutcome) -> StepResult:
        """The first step, failed before it began: this run does not hold the host's lock."""
        spec = specs[0]
        result = StepResult(Status.FAILED, f"not locked, nothing done: {why.reason}",
                            {"failure": "not-locked"})
        self.bus.emit("step_start", host=name, step=spec.name, data={"kind": str(spec.kind)})
        self.bus.emit("step_end", host=name, step=spec.name, status=result.status.value,
                      reason=result.reason, data={**result.data, "attempts": 0,
                                                  "duration": 0.0})
        return result

    def _steps_on(self, name: str, specs: list[Any]) -> list[StepResult]:
        transport = self.connect(self.plan.host(name))
        ctx = self._context(name, transport, None)
        results = []
        try:
            guards_left(ctx, self.bus, self.plan.run_id)  # none at the host, and shown
            facts = ctx.facts(*digest_paths(ctx.target))
            plan = plan_host(facts, ctx.target, specs, self._where)
            for step in plan.steps:
                call = partial(apply, ctx, step.kind, step.decision)
                results.append(self._run_step(ctx, step.spec, call))
                if results[-1].failed:
                    break
        finally:
            transport.close()
        return results

    def _emit_skip(self, host: str | None, spec: Any, reason: str) -> None:
        self.bus.emit("step_start", host=host, step=spec.name, data={"kind": spec.kind})
        self.bus.emit(
            "step_end",
            host=host,
            step=spec.name,
            status="skipped",
            reason=reason,
            data={"attempts": 0, "duration": 0.0},
        )

    def _note(self, host: str, message: str) -> None:
        self.bus.emit("note", host=host, reason=message)

    def _run_step(
        self, ctx: HostContext | None, spec: Any, call: Callable[[], StepResult]
    ) -> StepResult:
        host = ctx.name if ctx else None
        self.bus.emit("step_start", host=host, step=spec.name, data={"kind": str(spec.kind)})
        started = time.monotonic()

        def attempt() -> StepResult:
            if ctx is not None:
                ctx.deadline = time.monotonic() + (spec.timeout or DEFAULT_STEP_TIMEOUT)
            return call()

        def on_retry(number: int, exc: BaseException) -> None:
            self.bus.emit(
                "retry",
                host=host,
                step=spec.name,
                reason=str(exc),
                data={"attempt": number, "failure": failure_class(exc)},
            )

        try:
            result, attempts = run_with_retry(attempt, spec.retry, on_retry)
            result.attempts = attempts
        except Exception as e:  # whatever a step raises is that step's failure
            output = getattr(e, "output", "") or getattr(e, "stderr", "")
            result = StepResult(
                Status.FAILED,
                failure_reason(e),
                {**getattr(e, "data", {}), "failure": failure_class(e)},
                output=tail(str(output), 3000),
                attempts=spec.retry.attempts,
            )
        finally:
            if ctx is not None:
                ctx.deadline = None
        result.duration = round(time.monotonic() - started, 3)
        self.bus.emit(
            "step_end",
            host=host,
            step=spec.name,
            status=result.status.value,
            reason=result.reason,
            data={
                **result.data,
                "attempts": result.attempts,
                "duration": result.duration,
                "output": tail(result.output, 2000),
            },
        )
        return result




def _still_validated(facts: HostFacts, release: Release | None) -> bool:
    """A resumed run: the host still serves the release this run validated there."""
    return bool(
        release
        and facts.current_release == release.id
        and facts.daemon.running
        and not facts.held
    )

