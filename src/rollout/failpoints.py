"""Failpoints: real faults injected on purpose, for the fault-matrix tests.

ROLLOUT_FAILPOINTS="upload-drop@lab-2:1,upload-corrupt@lab-3:1" makes the first upload to
lab-2 lose its SSH connection half-way (the socket is really closed), and the first one to
lab-3 arrive with one byte flipped. Unset, nothing here does anything.

Park points hold a run at a known place so that a test can act there, waiting on an event
rather than on time: "park-after-locks@controller" stops the run once it holds every
host's lock, until the file $ROLLOUT_PARK_DIR/park-after-locks.go exists; a host's park
point, "park-before-drain@lab-3", holds that host alone before its step runs.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable
from pathlib import Path

_lock = threading.Lock()
_remaining: dict[tuple[str, str], int] | None = None


def _load() -> dict[tuple[str, str], int]:
    points: dict[tuple[str, str], int] = {}
    for item in filter(None, os.environ.get("ROLLOUT_FAILPOINTS", "").split(",")):
        name, _, rest = item.strip().partition("@")
        host, _, count = rest.partition(":")
        points[(name, host)] = int(count or 1)
    return points


def hit(name: str, host: str) -> bool:
    """True (and one use consumed) when failpoint `name` is armed for `host`."""
    global _remaining
    with _lock:
        if _remaining is None:
            _remaining = _load()
        left = _remaining.get((name, host), 0)
        if left <= 0:
            return False
        _remaining[(name, host)] = left - 1
        return True


PARK_LIMIT = 900.0  # seconds: a forgotten park never holds a run forever


def park(name: str, announce: Callable[[str, str], None], where: str = "controller") -> None:
    """When `name@where` is armed: announce(name, go file), then wait for that file."""
    if not hit(name, where):
        return
    go = Path(os.environ.get("ROLLOUT_PARK_DIR", ".")) / f"{name}.go"
    announce(name, str(go))
    end = time.monotonic() + PARK_LIMIT
    while not go.exists() and time.monotonic() < end:
        time.sleep(0.05)
