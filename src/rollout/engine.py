"""Execute a plan: controller steps once, then hosts in batches, each host at its own pace."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

from rollout.config.batches import max_fail_exceeded
from rollout.config.render import evaluate_condition
from rollout.errors import RolloutError, StepFailed, TransportError
from rollout.events import EventBus, Status, StepResult
from rollout.layout import Layout
from rollout.plan import Plan
from rollout.retry import failure_class, run_with_retry
from rollout.rollback import roll_back_host
from rollout.steps import HOST_STEPS, image
from rollout.steps.base import HostContext, Release
from rollout.transport.base import Transport

Connect = Callable[[Any], Transport]


@dataclass
class HostOutcome:
    host: str
    status: str  # validated, failed, rolled_back, unreachable, not_started
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

    @property
    def exit_code(self) -> int:
        ok = all(o.succeeded for o in self.outcomes.values())
        return 0 if ok and not self.aborted and self.outcomes else 1


class Engine:
    def __init__(self, plan: Plan, bus: EventBus, connect: Connect, cache_dir: Path,
                 interrupted: threading.Event | None = None) -> None:
        self.plan = plan
        self.bus = bus
        self.connect = connect
        self.cache_dir = cache_dir
        self.interrupted = interrupted or threading.Event()

    def run(self) -> RunSummary:
        plan = self.plan
        self.bus.emit("run_start", data=plan.describe())
        summary = RunSummary(plan.run_id, {})
        release = self._controller_steps()
        summary.release = release
        if release is None:
            summary.aborted = "controller steps failed"
        else:
            self._batches(release, summary)
        for name in plan.host_names:
            summary.outcomes.setdefault(
                name, HostOutcome(name, "not_started", summary.aborted or "not reached"))
        self.bus.emit("run_end", status="ok" if summary.exit_code == 0 else "failed",
                      reason=summary.aborted,
                      data={n: o.__dict__ for n, o in summary.outcomes.items()})
        return summary

    def _controller_steps(self) -> Release | None:
        ctx = image.ControllerContext(self.plan.playbook.build, self.plan.version,
                                      self.cache_dir)
        for spec in self.plan.controller_steps:
            fn = image.build if spec.kind == "build" else image.extract
            result = self._run_step(None, spec, partial(fn, ctx, spec.params))
            if result.failed:
                return None
        return ctx.release

    def _batches(self, release: Release, summary: RunSummary) -> None:
        rolling = self.plan.playbook.rolling
        for index, batch in enumerate(self.plan.batches):
            if self.interrupted.is_set():
                summary.aborted = "interrupted: no new hosts started"
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
                summary.aborted = (f"{failed} failed host(s) exceed max_fail_percentage "
                                   f"{rolling.max_fail_percentage}%")
                return
            if rolling.pause_between_batches and index + 1 < len(self.plan.batches):
                time.sleep(float(rolling.pause_between_batches))

    def _host(self, name: str, release: Release) -> HostOutcome:
        host = self.plan.host(name)
        try:
            transport = self.connect(host)
        except RolloutError as e:
            return self._unreachable(name, e)
        ctx = HostContext(host=host, transport=transport, layout=Layout(self.plan.root),
                          settings=self.plan.settings_for(name), release=release, log=partial(self._note, name))
        try:
            return self._host_steps(ctx)
        finally:
            transport.close()

    def run_steps_on(self, name: str, specs: list[Any]) -> list[StepResult]:
        """Run some steps on one host, outside a rollout (the single-step commands)."""
        host = self.plan.host(name)
        transport = self.connect(host)
        ctx = HostContext(host=host, transport=transport, layout=Layout(self.plan.root),
                          settings=self.plan.settings_for(name), log=partial(self._note, name))
        results = []
        try:
            for spec in specs:
                results.append(self._run_step(ctx, spec, partial(HOST_STEPS[spec.kind], ctx,
                                                                  spec.params)))
                if results[-1].failed:
                    break
        finally:
            transport.close()
        return results

    def _emit_skip(self, host: str, spec: Any, reason: str) -> None:
        self.bus.emit("step_start", host=host, step=spec.name, data={"kind": spec.kind})
        self.bus.emit("step_end", host=host, step=spec.name, status="skipped", reason=reason,
                      data={"attempts": 0, "duration": 0.0})

    def _note(self, host: str, message: str) -> None:
        self.bus.emit("note", host=host, reason=message)

    def _unreachable(self, name: str, error: Exception) -> HostOutcome:
        self.bus.emit("host_end", host=name, status="unreachable", reason=str(error))
        return HostOutcome(name, "unreachable", str(error))

    def _host_steps(self, ctx: HostContext) -> HostOutcome:
        steps: dict[str, str] = {}
        assert ctx.release is not None
        for spec in self.plan.host_steps:
            if not evaluate_condition(spec.when, ctx.template_context()):
                self._emit_skip(ctx.name, spec, f"when: {spec.when} is false")
                continue
            result = self._run_step(ctx, spec, partial(HOST_STEPS[spec.kind], ctx, spec.params))
            steps[spec.name] = result.status.value
            if result.failed:
                return self._after_failure(ctx, spec.kind, result, steps)
        outcome = HostOutcome(ctx.name, "validated", f"running release {ctx.release.id}, "
                              "validation passed", ctx.release.id, steps)
        self.bus.emit("host_end", host=ctx.name, status=outcome.status, reason=outcome.reason,
                      data={"release": ctx.release.id})
        return outcome

    def _after_failure(self, ctx: HostContext, kind: str, result: StepResult,
                       steps: dict[str, str]) -> HostOutcome:
        cause = f"{kind} failed: {result.reason}"
        rolled = roll_back_host(ctx, cause, self._run_step)
        status = "rolled_back" if rolled.ok else "failed"
        reason = f"{cause}; {rolled.reason}"
        self.bus.emit("host_end", host=ctx.name, status=status, reason=reason,
                      data={"release": rolled.release, "cause": cause})
        return HostOutcome(ctx.name, status, reason, rolled.release, steps)

    def _run_step(self, ctx: HostContext | None, spec: Any,
                  call: Callable[[], StepResult]) -> StepResult:
        host = ctx.name if ctx else None
        self.bus.emit("step_start", host=host, step=spec.name, data={"kind": spec.kind})
        started = time.monotonic()

        def attempt() -> StepResult:
            if ctx is not None:
                ctx.deadline = time.monotonic() + spec.timeout if spec.timeout else None
            return call()

        def on_retry(number: int, exc: BaseException) -> None:
            self.bus.emit("retry", host=host, step=spec.name, reason=str(exc),
                          data={"attempt": number, "failure": failure_class(exc)})

        try:
            result, attempts = run_with_retry(attempt, spec.retry, on_retry)
            result.attempts = attempts
        except (StepFailed, TransportError, RolloutError) as e:
            output = getattr(e, "output", "") or getattr(e, "stderr", "")
            result = StepResult(Status.FAILED, str(e), {"failure": failure_class(e)},
                                output=str(output)[-3000:], attempts=spec.retry.attempts)
        finally:
            if ctx is not None:
                ctx.deadline = None
        result.duration = round(time.monotonic() - started, 3)
        self.bus.emit("step_end", host=host, step=spec.name, status=result.status.value,
                      reason=result.reason, data={**result.data, "attempts": result.attempts,
                                                  "duration": result.duration,
                                                  "output": result.output[-2000:]})
        return result
