"""A host lock dated in the future (issue 28): its host's clock stepped back, or its mtime was
forged. Its age cannot be measured, so it counts as stale: --break-lock breaks it, a wait
for it ends at its deadline, and every message says its date is in the future."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest
from test_locks import context, lock_file, me, other_holder, write_lock

from rollout.engine.locks import FUTURE_SLACK, FoundLock, LockPolicy, take_host_lock
from rollout.errors import LockHeld
from rollout.host.scripts.actions import lock as hostlock

YEAR = 365 * 86400.0


def future_lock(tmp: Path, ahead: float) -> None:
    write_lock(tmp, "h1", other_holder())
    when = time.time() + ahead
    os.utime(lock_file(tmp, "h1"), (when, when))


def test_the_host_says_how_far_ahead_a_lock_is_dated(tmp_path: Path) -> None:
    future_lock(tmp_path, YEAR)
    found = hostlock.found(str(lock_file(tmp_path, "h1")))
    assert found is not None and found["age"] == 0.0 and found["ahead"] > YEAR - 60
    os.utime(lock_file(tmp_path, "h1"), None)
    assert hostlock.found(str(lock_file(tmp_path, "h1")))["ahead"] == 0.0  # type: ignore[index]


def test_a_future_lock_is_stale_however_young_it_looks() -> None:
    raw = {"text": other_holder(), "sha256": "s", "age": 0.0, "ahead": YEAR}
    found = FoundLock.read("h1", raw)
    assert found.future and found.breakable(stale_after=1e9)
    assert "its date is in the future" in found.describe()
    near = FoundLock.read("h1", {**raw, "ahead": FUTURE_SLACK / 2})  # a small clock step
    assert not near.future and not near.breakable(stale_after=300)


@pytest.mark.parametrize("ahead", ["soon", float("nan"), -5, True, None, 1e400])
def test_a_hostile_ahead_is_read_safely(ahead: object) -> None:
    raw = {"text": other_holder(), "sha256": "s", "age": 0.0, "ahead": ahead}
    assert FoundLock.read("h1", raw).ahead == 0.0  # type: ignore[arg-type]


def test_break_lock_breaks_a_future_lock(tmp_path: Path) -> None:
    future_lock(tmp_path, 100 * YEAR)
    broken: list[FoundLock] = []
    policy = LockPolicy(break_stale=True, stale_after=300)
    take_host_lock(context(tmp_path, "h1"), me(), policy, broken.append)
    assert broken and broken[0].future
    assert "run-a" in lock_file(tmp_path, "h1").read_text()


def test_without_break_lock_the_refusal_names_the_future_date(tmp_path: Path) -> None:
    future_lock(tmp_path, YEAR)
    with pytest.raises(LockHeld, match="in the future") as refused:
        take_host_lock(context(tmp_path, "h1"), me(), LockPolicy(stale_after=300), print)
    assert "--break-lock breaks it" in str(refused.value)
    assert "run-b" in lock_file(tmp_path, "h1").read_text()  # nothing broken unasked


def test_a_wait_for_a_future_lock_ends(tmp_path: Path) -> None:
    future_lock(tmp_path, YEAR)
    start = time.monotonic()
    with pytest.raises(LockHeld, match="in the future"):
        take_host_lock(context(tmp_path, "h1"), me(), LockPolicy(wait=0.5), print)
    assert time.monotonic() - start < 30
