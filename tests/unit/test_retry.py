"""Retry policies: applied by the engine, only to the failure classes a step allows."""

from __future__ import annotations

import pytest

from rollout.config.steps import RetryPolicy
from rollout.engine.retry import failure_class, run_with_retry
from rollout.errors import CommandFailed, StepFailed, TransportError
from rollout.steps.base import StepTimeout


def flaky(failures: list[BaseException]):  # type: ignore[no-untyped-def]
    def call() -> str:
        if failures:
            raise failures.pop(0)
        return "done"

    return call


def test_retries_listed_failures_then_succeeds() -> None:
    sleeps: list[float] = []
    policy = RetryPolicy(attempts=3, backoff=2, multiplier=3, on=["transport"])
    seen: list[int] = []
    result, attempts = run_with_retry(
        flaky([TransportError("drop"), TransportError("drop")]),
        policy,
        lambda n, e: seen.append(n),
        sleep=sleeps.append,
    )
    assert (result, attempts) == ("done", 3)
    assert sleeps == [2.0, 6.0]
    assert seen == [1, 2]


def test_unlisted_failure_is_not_retried() -> None:
    policy = RetryPolicy(attempts=5, on=["transport"])
    with pytest.raises(CommandFailed):
        run_with_retry(
            flaky([CommandFailed("x", 1, "", "")]), policy, lambda n, e: None, sleep=lambda s: None
        )


def test_non_retryable_step_failure_stops_at_once() -> None:
    calls = []

    def call() -> str:
        calls.append(1)
        raise StepFailed("drain deadline", retryable=False)

    with pytest.raises(StepFailed):
        run_with_retry(call, RetryPolicy(attempts=4), lambda n, e: None, sleep=lambda s: None)
    assert len(calls) == 1


def test_gives_up_after_attempts_and_reraises_last() -> None:
    policy = RetryPolicy(attempts=2, on=["any"])
    with pytest.raises(StepTimeout):
        run_with_retry(
            flaky([StepFailed("a"), StepTimeout("b"), StepFailed("c")]),
            policy,
            lambda n, e: None,
            sleep=lambda s: None,
        )


def test_failure_classes() -> None:
    assert failure_class(StepTimeout("t")) == "timeout"
    assert failure_class(TransportError("t")) == "transport"
    assert failure_class(CommandFailed("c", 1, "", "")) == "command_failed"
    assert failure_class(StepFailed("s")) == "step_failed"
    assert failure_class(ValueError("bug")) == "internal"
