"""Progress on long work (uploads, pulls, staging) as plain data: bytes, rate and estimated
time per host, computed from samples with an injectable clock; when a sample is worth an
event (at most one per host and transfer a second, the first and the last always); and when a
console without a terminal prints a whole line (every 10 s or every 25 %, whichever first).
"""

from __future__ import annotations

import json
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

Clock = Callable[[], float]
Emit = Callable[..., Any]  # EventBus.emit with the host bound: emit(kind, **fields)

RATE_WINDOW = 10.0  # seconds of samples the rate is measured over
EVENT_INTERVAL = 1.0  # seconds between two progress events of one transfer, at least
PLAIN_INTERVAL = 10.0  # seconds between two plain lines of one transfer, at most
PLAIN_STEP = 25  # percent: a plain line each time the transfer crosses a multiple of it
MAX_HOST_LINE = 512  # characters: a longer line from a host is not a progress line


@dataclass(frozen=True)
class Progress:
    """One transfer's state: `what` is pull, push, stage or params."""

    what: str
    done: int
    total: int
    rate: float | None  # bytes per second over the last RATE_WINDOW; None: not known yet
    elapsed: float

    @property
    def eta(self) -> float | None:
        if not self.rate or self.done >= self.total:
            return None if self.done < self.total else 0.0
        return (self.total - self.done) / self.rate

    @property
    def percent(self) -> float:
        return 100.0 if self.total <= 0 else min(100.0, 100.0 * self.done / self.total)

    @property
    def finished(self) -> bool:
        return self.done >= self.total

    def to_data(self) -> dict[str, Any]:
        eta = self.eta
        return {"what": self.what, "bytes": self.done, "total": self.total,
                "rate": None if self.rate is None else round(self.rate, 1),
                "eta": None if eta is None else round(eta, 1),
                "elapsed": round(self.elapsed, 3)}  # fmt: skip


@dataclass
class RateMeter:
    """Bytes per second over the last `window` seconds of samples."""

    window: float = RATE_WINDOW
    _samples: deque[tuple[float, int]] = field(default_factory=deque)

    def add(self, now: float, done: int) -> float | None:
        self._samples.append((now, done))
        while len(self._samples) > 2 and now - self._samples[1][0] >= self.window:
            self._samples.popleft()
        first_t, first_done = self._samples[0]
        if now - first_t <= 0:
            return None
        return max(0.0, (done - first_done) / (now - first_t))


class Tracker:
    """One transfer on one host: turns byte counts into `progress` events, at most one per
    `interval` seconds (the first and the last always)."""

    def __init__(self, emit: Emit, step: str, what: str, total: int,
                 clock: Clock = time.monotonic, interval: float = EVENT_INTERVAL) -> None:
        self.emit, self.step, self.what, self.total = emit, step, what, max(0, total)
        self.clock, self.interval = clock, interval
        self.started = clock()
        self.meter = RateMeter()
        self._last_emit: float | None = None
        self._ended = False

    def offset(self, before: int) -> Callable[[int], None]:
        """A callback for one file's bytes sent, `before` bytes of earlier files done."""
        def sent(n: int) -> None:
            self.update(before + n)

        return sent

    def update(self, done: int) -> Progress | None:
        """Record `done` bytes so far; the Progress emitted, or None when it was too soon."""
        now = self.clock()
        done = max(0, min(done, self.total))
        rate = self.meter.add(now, done)
        final = done >= self.total
        due = self._last_emit is None or now - self._last_emit >= self.interval
        if self._ended or not (final or due):
            return None
        self._last_emit, self._ended = now, final
        progress = Progress(self.what, done, self.total, rate, now - self.started)
        self.emit("progress", step=self.step, data=progress.to_data())
        return progress


def tracker_for(emit: Emit | None, step: str, what: str, total: int) -> Tracker | None:
    return None if emit is None else Tracker(emit, step, what, total)


class PlainLines:
    """Without a terminal: which progress events become a printed line. The first of a
    transfer, its last, and one whenever PLAIN_INTERVAL seconds passed or the transfer
    crossed a multiple of PLAIN_STEP percent since the line before."""

    def __init__(self, interval: float = PLAIN_INTERVAL, step: int = PLAIN_STEP) -> None:
        self.interval, self.step = interval, step
        self._last: dict[tuple[str, str], tuple[float, int]] = {}

    def forget(self, host: str) -> None:
        """The host's step ended: its next transfer starts afresh (its first line shown)."""
        for key in [k for k in self._last if k[0] == host]:
            del self._last[key]

    def due(self, key: tuple[str, str], now: float, percent: float, finished: bool) -> bool:
        bucket = int(percent // self.step)
        last = self._last.get(key)
        if finished:
            self._last.pop(key, None)
            return True
        if last is not None and now - last[0] < self.interval and bucket <= last[1]:
            return False
        self._last[key] = (now, bucket)
        return True


def parse_host_progress(line: str, names: set[str]) -> tuple[str, int] | None:
    """A progress line a host script printed (hostile data): `{"progress": {"file": NAME,
    "bytes": N}}` with NAME one of `names` and N a non-negative int; None for anything
    else (too long, not JSON, wrong types, an unknown file)."""
    if len(line) > MAX_HOST_LINE or not line.startswith('{"progress"'):
        return None
    try:
        data = json.loads(line)
    except ValueError:
        return None
    body = data.get("progress") if isinstance(data, dict) else None
    if not isinstance(body, dict):
        return None
    name, done = body.get("file"), body.get("bytes")
    if not isinstance(name, str) or name not in names:
        return None
    if not isinstance(done, int) or isinstance(done, bool) or done < 0:
        return None
    return name, done


def format_bytes(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(n) < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} GiB"  # pragma: no cover - the loop returns


def format_progress(data: dict[str, Any]) -> str:
    """`pull 45.0 MiB / 200.0 MiB (22%) 5.0 MiB/s, 31 s left` from a progress event's data."""
    done, total = _int(data.get("bytes")), _int(data.get("total"))
    percent = 100 if total <= 0 else min(100, 100 * done // total)
    rate, eta = data.get("rate"), data.get("eta")
    text = f"{data.get('what', '')} {format_bytes(done)} / {format_bytes(total)} ({percent}%)"
    if isinstance(rate, (int, float)):
        text += f" {format_bytes(rate)}/s"
    if isinstance(eta, (int, float)) and done < total:
        text += f", {eta:.0f} s left"
    return text


def _int(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else 0
