"""The lock heartbeat: a host whose refresh waits (its connection busy in a long call) never
delays the refresh of the other hosts' locks."""

from __future__ import annotations

import threading
import time
from types import SimpleNamespace
from typing import Any

import pytest

from rollout.engine import locks
from rollout.engine.locks import FleetLocks, Holder, LockEvents, LockPolicy


def test_a_host_whose_refresh_waits_never_delays_the_others(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A beat every 0.2 s; "busy"'s refresh waits until let go (its connection is in a
    long call): the idle hosts are refreshed at every beat meanwhile, "busy" is not asked
    again while its refresh waits, and that is said once."""
    let_go = threading.Event()
    seen: dict[str, list[float]] = {}
    lock = threading.Lock()

    def refresh(ctx: Any, me: Holder, wait: float = 0.0) -> None:
        with lock:
            seen.setdefault(ctx.name, []).append(time.monotonic())
        if ctx.name == "busy":
            let_go.wait(60)

    monkeypatch.setattr(locks, "refresh_host_lock", refresh)
    slow: list[str] = []
    events = LockEvents(print, print, print, print, slow.append)
    fleet = FleetLocks(Holder("r", "op", "ctl", 1, 0.0, "v"), LockPolicy(stale_after=1.2),
                       events, workers=1)
    for name in ("busy", "idle-1", "idle-2"):
        fleet.held[name] = SimpleNamespace(name=name)  # type: ignore[assignment]
    beat = threading.Thread(target=fleet.beat, daemon=True)
    beat.start()
    try:
        deadline = time.monotonic() + 30
        while len(seen.get("idle-1", [])) < 8 or len(seen.get("idle-2", [])) < 8:
            assert time.monotonic() < deadline, seen
            time.sleep(0.02)
    finally:
        let_go.set()
        fleet._stop.set()
        beat.join(30)
    assert not beat.is_alive()
    assert len(seen["busy"]) <= 2, "asked again while its refresh waited"
    assert slow == ["busy"]
    for name in ("idle-1", "idle-2"):
        times = seen[name][:8]
        gaps = [b - a for a, b in zip(times, times[1:], strict=False)]
        assert max(gaps) < 1.0, (name, gaps)  # a beat is 0.2 s; stale after 1.2 s


def test_a_refresh_waits_half_a_beat_behind_the_hosts_step_before_going_beside(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The heartbeat asks each refresh to wait at most half its period behind the call under
    way on the host (most end by then) before it goes on a channel of its own: it is never
    late for the next beat."""
    waits: list[float] = []

    def refresh(ctx: Any, me: Holder, wait: float = 0.0) -> None:
        waits.append(wait)

    monkeypatch.setattr(locks, "refresh_host_lock", refresh)
    fleet = FleetLocks(Holder("r", "op", "ctl", 1, 0.0, "v"), LockPolicy(stale_after=1.2),
                       LockEvents(print, print, print, print), workers=1)
    fleet.held["h"] = SimpleNamespace(name="h")  # type: ignore[assignment]
    beat = threading.Thread(target=fleet.beat, daemon=True)
    beat.start()
    try:
        deadline = time.monotonic() + 30
        while not waits:
            assert time.monotonic() < deadline
            time.sleep(0.02)
    finally:
        fleet._stop.set()
        beat.join(30)
    assert waits[0] == pytest.approx(fleet.policy.heartbeat / 2)
