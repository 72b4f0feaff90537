"""One step, run once as the engine runs every step: its events, its deadline, its retry
policy (rollout.engine.retry), and whatever it raises turned into its failure."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Protocol

from rollout.config.steps import RetryPolicy
from rollout.engine.hostplan import failure_reason
from rollout.engine.retry import failure_class, run_with_retry
from rollout.output.events import EventBus, Status, StepResult
from rollout.secrets import tail
from rollout.steps.base import HostContext

DEFAULT_STEP_TIMEOUT = 900.0  # seconds; a step with no timeout of its own never hangs a run


class Spec(Protocol):
    """What running a step needs of it: a playbook's StepSpec, or a rollback step."""

    @property
    def name(self) -> str: ...

    @property
    def kind(self) -> str: ...

    @property
    def timeout(self) -> float | None: ...

    @property
    def retry(self) -> RetryPolicy: ...


Call = Callable[[], StepResult]
RunStep = Callable[[HostContext | None, Spec, Call], StepResult]
"""Run one step (on a host's context, None: on the controller): StepRunner.run."""


class StepRunner:
    """Runs steps and says so on the run's events (step_start, retry, step_end)."""

    def __init__(self, bus: EventBus) -> None:
        self.bus = bus

    def run(self, ctx: HostContext | None, spec: Spec, call: Call) -> StepResult:
        host = ctx.name if ctx else None
        self.bus.emit("step_start", host=host, step=spec.name, data={"kind": str(spec.kind)})
        started = time.monotonic()
        try:
            result = self._attempts(ctx, spec, call)
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

    def _attempts(self, ctx: HostContext | None, spec: Spec, call: Call) -> StepResult:
        """The step under its retry policy, each attempt with its deadline; a failure that
        is not retried (or the last) is the step's result, never an exception."""

        def attempt() -> StepResult:
            if ctx is not None:
                ctx.deadline = time.monotonic() + (spec.timeout or DEFAULT_STEP_TIMEOUT)
            return call()

        def on_retry(number: int, exc: BaseException) -> None:
            self.bus.emit("retry", host=ctx.name if ctx else None, step=spec.name,
                          reason=str(exc),
                          data={"attempt": number, "failure": failure_class(exc)})

        try:
            result, attempts = run_with_retry(attempt, spec.retry, on_retry)
            result.attempts = attempts
            return result
        except Exception as e:  # whatever a step raises is that step's failure
            output = getattr(e, "output", "") or getattr(e, "stderr", "")
            return StepResult(
                Status.FAILED,
                failure_reason(e),
                {**getattr(e, "data", {}), "failure": failure_class(e)},
                output=tail(str(output), 3000),
                attempts=spec.retry.attempts,
            )

    def skip(self, host: str | None, spec: Spec, reason: str) -> None:
        """A step that does not run, and why: its start and its end, skipped."""
        self.bus.emit("step_start", host=host, step=spec.name, data={"kind": spec.kind})
        self.bus.emit(
            "step_end",
            host=host,
            step=spec.name,
            status="skipped",
            reason=reason,
            data={"attempts": 0, "duration": 0.0},
        )
