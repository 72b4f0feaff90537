"""Step declarations of a playbook: which step, in which order, with which retry policy."""

from __future__ import annotations

from enum import StrEnum
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from .durations import Seconds, check_seconds_param


class StepKind(StrEnum):
    BUILD = "build"
    EXTRACT = "extract"
    PREFLIGHT = "preflight"
    SUPERVISE = "supervise"
    UPLOAD = "upload"
    CONFIG = "config"
    STOP = "stop"
    DRAIN = "drain"
    SWITCH = "switch"
    START = "start"
    READY = "ready"
    VALIDATE = "validate"
    PRUNE = "prune"


CONTROLLER_KINDS = frozenset({StepKind.BUILD, StepKind.EXTRACT})
"""Kinds that run once, on the controller, before any host step."""

Scope = Literal["controller", "host"]
DURATION_PARAMS = frozenset({"timeout", "grace", "deadline", "zombie_grace", "wait"})
"""Step params that are seconds (checked like every other duration)."""


class FailureClass(StrEnum):
    """What went wrong, as far as retry policies are concerned."""

    ANY = "any"
    TRANSPORT = "transport"  # connection refused, dropped, host key trouble
    COMMAND_FAILED = "command_failed"  # a command exited non-zero
    TIMEOUT = "timeout"  # the step or a command ran past its time
    STEP_FAILED = "step_failed"  # the step's check failed (e.g. the proof said FAILED)


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, coerce_numbers_to_str=True)


class RetryPolicy(_Strict):
    """When and how often the engine repeats a failed step (exponential backoff)."""

    attempts: int = Field(default=1, ge=1, description="Total attempts, the first one included.")
    backoff: Seconds = Field(
        default=1.0, ge=0, description="Seconds to wait before the first retry."
    )
    multiplier: float = Field(
        default=2.0, ge=1, le=100, description="Each later wait is this times the last."
    )
    max_backoff: Seconds = Field(
        default=60.0, ge=0, description="Longest wait between attempts, seconds."
    )
    jitter: Seconds = Field(
        default=0.0, ge=0, description="Random seconds (0..jitter) added to each wait."
    )
    on: list[FailureClass] = Field(
        default_factory=lambda: [FailureClass.ANY],
        min_length=1,
        description="Failure classes that are retried: any, transport, command_failed, "
        "timeout, step_failed.",
    )

    def retries(self, failure: FailureClass) -> bool:
        """Whether a failure of this class may be retried (attempts permitting)."""
        return FailureClass.ANY in self.on or failure in self.on

    def delay(self, attempt: int) -> float:
        """Seconds to wait after failed attempt number `attempt` (1-based), jitter excluded."""
        return float(min(self.max_backoff, self.backoff * self.multiplier ** (attempt - 1)))


class StepSpec(_Strict):
    """One step of the rollout. Steps run in the order given."""

    name: str = Field(pattern=r"^[A-Za-z0-9._-]+$", description="Unique step name.")
    kind: StepKind = Field(
        description="What the step does: " + ", ".join(k.value for k in StepKind) + "."
    )
    timeout: Seconds | None = Field(
        default=None,
        gt=0,
        description="Seconds before the step fails; null: the kind's own default.",
    )
    retry: RetryPolicy = Field(default_factory=RetryPolicy, description="Retry policy.")
    params: dict[str, Any] = Field(default_factory=dict, description="Kind-specific settings.")
    when: bool | str = Field(
        default=True,
        description="Run the step only when this is true: a bool or a Jinja2 expression, "
        "evaluated at run time (runtime template).",
    )

    @field_validator("params")
    @classmethod
    def _durations(cls, params: dict[str, Any]) -> dict[str, Any]:
        for name in DURATION_PARAMS.intersection(params):
            check_seconds_param(name, params[name])
        return params

    @property
    def scope(self) -> Scope:
        """ "controller" for build and extract (run once), "host" for the others."""
        return "controller" if self.kind in CONTROLLER_KINDS else "host"
