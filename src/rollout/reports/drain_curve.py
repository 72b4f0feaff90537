"""The memory curve of each drain, from the samples its step_end event carries.

Contract: the drain step's data has `samples`, a list of [seconds_since_drain_start, bytes]
(the working set), `budget` (bytes the new daemon needs) and `memory.limit`: the memory is
back once the working set is at most limit - budget, and that is where the budget line is
drawn. Older drains recorded [unix_time, bytes] with `started`, and a `threshold` share of
`memory.limit` (or `threshold_bytes`): those are read too.

A drain over within one sampling interval (the memory was back at the first look) has one
sample: its curve is that level held until the drain ended (`ended - started`, else the
step's duration), so it still draws as a line."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from rollout.reports.runlog import RunRecord, StepRun
from rollout.units import format_size

EPOCH_2001 = 1e9  # a sample time above this is a unix time, not seconds since the start
MIN_SPAN = 0.001  # seconds: the samples' resolution


@dataclass(frozen=True)
class Curve:
    host: str
    step: str
    outcome: str
    points: list[tuple[float, float]]
    line: float | None  # the level the drain waited for the memory to go below
    line_label: str  # what that level is, with its size: the chart draws it as is
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


def _held_until_the_end(points: list[tuple[float, float]], data: dict[str, Any],
                        duration: float) -> list[tuple[float, float]]:
    """One sampled moment made a line: its level, held until the drain ended."""
    if len({t for t, _ in points}) != 1:
        return points
    started, ended = _num(data.get("started")), _num(data.get("ended"))
    end = ended - started if started is not None and ended is not None else duration
    t, level = points[-1]
    return [*points, (round(max(end, t + MIN_SPAN), 3), level)]


def _size(value: float) -> str:
    return format_size(int(value))


def _line(data: dict[str, Any]) -> tuple[float | None, str]:
    budget, limit = _num(data.get("budget")), _limit(data)
    if budget is not None and limit is not None:
        level = max(0.0, limit - budget)
        return level, (f"new daemon fits below {_size(level)} "
                       f"(limit - its budget {_size(budget)})")
    if budget is not None:
        return budget, f"new daemon's budget {_size(budget)}"
    share = _num(data.get("threshold"))
    below = _num(data.get("threshold_bytes"))
    if below is None and limit is not None and share is not None:
        below = limit * share
    return (below, f"drained below {_size(below)}") if below is not None else (None, "")


def _limit(data: dict[str, Any]) -> float | None:
    memory = data.get("memory")
    return _num(memory.get("limit")) if isinstance(memory, dict) else None


def curve_of(host: str, step: StepRun) -> Curve | None:
    points = _points(step.data)
    if step.kind != "drain" or not points:
        return None
    points = _held_until_the_end(points, step.data, step.duration)
    line, label = _line(step.data)
    outcome = str(step.data.get("outcome") or step.status)
    return Curve(host, step.name, outcome, points, line, label, _limit(step.data))


def drain_curves(record: RunRecord) -> list[Curve]:
    curves = (curve_of(h.name, s) for h in record.hosts.values() for s in h.steps)
    return [c for c in curves if c is not None]
