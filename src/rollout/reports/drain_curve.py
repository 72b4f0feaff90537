"""The memory curve of each drain, from the samples its step_end event carries.

Contract: the drain step's data has `samples`, a list of [seconds_since_drain_start, bytes],
and `budget` (bytes). Older drains recorded [unix_time, bytes] with `started`, and a
`threshold` share of `memory.limit` (or `threshold_bytes`): those are read too."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from rollout.reports.runlog import RunRecord, StepRun

EPOCH_2001 = 1e9  # a sample time above this is a unix time, not seconds since the start


@dataclass(frozen=True)
class Curve:
    host: str
    step: str
    outcome: str
    points: list[tuple[float, float]]
    budget: float | None
    budget_label: str
    limit: float | None


def _num(value: Any) -> float | None:
    ok = isinstance(value, (int, float)) and not isinstance(value, bool)
    return float(value) if ok else None


def _points(data: dict[str, Any]) -> list[tuple[float, float]]:
    raw = data.get("samples")
    pairs = [(_num(s[0]), _num(s[1])) for s in raw or []
             if isinstance(s, (list, tuple)) and len(s) >= 2]
    points = [(t, b) for t, b in pairs if t is not None and b is not None]
    if points and points[0][0] > EPOCH_2001:
        origin = _num(data.get("started")) or points[0][0]
        points = [(t - origin, b) for t, b in points]
    return sorted((max(0.0, t), b) for t, b in points)


def _budget(data: dict[str, Any]) -> tuple[float | None, str]:
    if _num(data.get("budget")) is not None:
        return _num(data.get("budget")), "budget"
    if _num(data.get("threshold_bytes")) is not None:
        return _num(data.get("threshold_bytes")), "drained below"
    limit, share = _limit(data), _num(data.get("threshold"))
    if limit is not None and share is not None:
        return limit * share, "drained below"
    return None, "budget"


def _limit(data: dict[str, Any]) -> float | None:
    memory = data.get("memory")
    return _num(memory.get("limit")) if isinstance(memory, dict) else None


def curve_of(host: str, step: StepRun) -> Curve | None:
    points = _points(step.data)
    if step.kind != "drain" or not points:
        return None
    budget, label = _budget(step.data)
    outcome = str(step.data.get("outcome") or step.status)
    return Curve(host, step.name, outcome, points, budget, label, _limit(step.data))


def drain_curves(record: RunRecord) -> list[Curve]:
    curves = (curve_of(h.name, s) for h in record.hosts.values() for s in h.steps)
    return [c for c in curves if c is not None]
