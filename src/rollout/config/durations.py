"""Durations in seconds: finite and bounded, so a `.inf` or `1e300` is a load error."""

from __future__ import annotations

import math
from typing import Annotated, Any

from pydantic import AfterValidator

MAX_SECONDS = 7 * 24 * 3600.0
"""The longest duration any setting takes: a week."""


def check_seconds(value: float) -> float:
    if not math.isfinite(value) or not -MAX_SECONDS <= value <= MAX_SECONDS:
        raise ValueError(f"must be a finite number of seconds up to {MAX_SECONDS:.0f}")
    return value


def check_seconds_param(name: str, value: Any) -> None:
    """A step param that is a duration (timeout, grace, ...): a number, finite, bounded."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValueError(f"params.{name} must be a number of seconds, got {value!r}")
    try:
        check_seconds(float(value))
    except ValueError as exc:
        raise ValueError(f"params.{name} {exc}") from None


Seconds = Annotated[float, AfterValidator(check_seconds)]
