"""Retry policies from the playbook, applied in one place by the engine (tenacity)."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

from tenacity import (
    RetryCallState,
    Retrying,
    retry_if_exception,
    stop_after_attempt,
    wait_exponential,
    wait_random,
)

from rollout.config.steps import RetryPolicy
from rollout.errors import CommandFailed, StepFailed, TransportError
from rollout.steps.base import StepTimeout

T = TypeVar("T")


def failure_class(exc: BaseException) -> str:
    """The name a playbook's `retry.on` uses for a failure."""
    if isinstance(exc, StepTimeout):
        return "timeout"
    if isinstance(exc, TransportError):
        return "transport"
    if isinstance(exc, CommandFailed):
        return "command_failed"
    if isinstance(exc, StepFailed):
        return "step_failed"
    return "internal"


def is_retryable(exc: BaseException, on: list[str]) -> bool:
    if isinstance(exc, StepFailed) and not exc.retryable:
        return False
    cls = failure_class(exc)
    if cls == "internal":
        return False
    return "any" in on or cls in on


def run_with_retry(
    fn: Callable[[], T],
    policy: RetryPolicy,
    on_retry: Callable[[int, BaseException], None],
    sleep: Callable[[float], None] = time.sleep,
) -> tuple[T, int]:
    """Call fn under the policy; returns (result, attempts). Re-raises the last failure."""
    attempts = max(1, policy.attempts)
    on = [str(c) for c in policy.on]
    wait = wait_exponential(
        multiplier=float(policy.backoff), exp_base=float(policy.multiplier),
        max=float(policy.max_backoff),
    ) + wait_random(0, float(policy.jitter))

    def before_sleep(state: RetryCallState) -> None:
        exc = state.outcome.exception() if state.outcome else None
        if exc is not None:
            on_retry(state.attempt_number, exc)

    retrying = Retrying(
        stop=stop_after_attempt(attempts),
        wait=wait,
        sleep=sleep,
        reraise=True,
        retry=retry_if_exception(lambda e: is_retryable(e, on)),
        before_sleep=before_sleep,
    )
    count = 0

    def attempt() -> T:
        nonlocal count
        count += 1
        return fn()

    return retrying(attempt), count
