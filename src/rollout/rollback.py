"""Per-host automatic rollback: back to the release the host had, started and validated."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from typing import Any

from rollout.events import StepResult
from rollout.steps import HOST_STEPS
from rollout.steps.base import HostContext
from rollout.steps.config import restore_config_of
from rollout.steps.current import current_release, point_current_at, recorded_previous

RunStep = Callable[[HostContext | None, Any, Callable[[], StepResult]], StepResult]

_UNTOUCHED = {"supervise", "upload", "config", "preflight", "lock"}
_BACK_ON = ("stop", "drain", "start", "ready", "validate")


@dataclass(frozen=True)
class _Once:
    attempts: int = 1
    on: tuple[str, ...] = ()
    backoff: float = 1.0
    max_backoff: float = 1.0
    jitter: float = 0.0


@dataclass(frozen=True)
class RollbackStep:
    name: str
    kind: str
    timeout: float | None = None
    params: dict[str, Any] = field(default_factory=dict)
    retry: _Once = _Once()


@dataclass(frozen=True)
class RollbackResult:
    ok: bool
    reason: str
    release: str | None


def roll_back_host(ctx: HostContext, cause: str, run_step: RunStep) -> RollbackResult:
    failed_kind = cause.split(" ", 1)[0]
    previous = _previous(ctx)
    if failed_kind in _UNTOUCHED or "stopped" not in ctx.notes:
        return RollbackResult(False, "host untouched: still on its previous release", previous)
    if not previous or (ctx.release and previous == ctx.release.id):
        spec = RollbackStep("rollback-stop", "stop", params={"force": True})
        run_step(ctx, spec, partial(HOST_STEPS["stop"], ctx, spec.params))
        return RollbackResult(
            False,
            "NO PREVIOUS RELEASE to go back to: host left stopped and held",
            current_release(ctx),
        )
    for kind in _BACK_ON:
        if kind == "drain" and failed_kind == "drain":
            ctx.log(
                "drain failed (deadline or plateau): restarting the previous release "
                "without waiting again (its memory is still charged)"
            )
            continue
        if kind == "start":
            if current_release(ctx) != previous:
                point_current_at(ctx, previous)
            if restore_config_of(ctx, previous):
                ctx.log(f"restored the config {previous} ran with")
        spec = RollbackStep(
            f"rollback-{kind}",
            kind,
            timeout=_timeout(ctx, kind),
            params={"force": True} if kind == "stop" else {},
        )
        result = run_step(ctx, spec, partial(HOST_STEPS[kind], ctx, spec.params))
        if result.failed:
            return RollbackResult(
                False, f"ROLLBACK FAILED at {kind}: {result.reason}", current_release(ctx)
            )
    return RollbackResult(True, f"rolled back to {previous}, validated", previous)


def _previous(ctx: HostContext) -> str | None:
    """The release to go back to: the one current pointed at before this run switched it."""
    if "previous_release" in ctx.notes:
        return ctx.notes["previous_release"]  # type: ignore[no-any-return]
    current = current_release(ctx)
    if ctx.release is not None and current == ctx.release.id:
        return recorded_previous(ctx)  # switched by a controller that died
    return current


def _timeout(ctx: HostContext, kind: str) -> float | None:
    daemon = ctx.settings.daemon
    return {
        "drain": float(daemon.drain.deadline) + 60,
        "ready": float(daemon.ready_timeout) + 30,
    }.get(kind)
