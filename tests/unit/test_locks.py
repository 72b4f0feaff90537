"""Host locks, run for real on folders of this machine (the lock script as sent to hosts).

Each "host" is a folder standing for its /data; the transport is local, so the lock script,
its flock and its atomic writes run exactly as they do on a host.
"""

from __future__ import annotations

import errno
import json
import os
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from contexts import AgentTransport, host_context, small_host

from rollout.engine.locks import (
    FleetLocks,
    FoundLock,
    Holder,
    LockEvents,
    LockPolicy,
    fleet_locks,
    holder_for,
    lock_order,
    parse_holder,
    take_host_lock,
)
from rollout.errors import LockHeld, TransportError
from rollout.host.layout import Layout
from rollout.host.scripts.actions import lock as hostlock
from rollout.steps.base import HostContext

HOSTS = ["h1", "h2", "h3"]


def me(run: str = "run-a") -> Holder:
    return holder_for(run, "alice", "ci-1", "v1")


def context(tmp: Path, name: str) -> HostContext:
    host = small_host(name, port=2200 + HOSTS.index(name))
    return host_context(host, AgentTransport(name), Layout(str(tmp / name)))


def lock_file(tmp: Path, name: str) -> Path:
    return tmp / name / "rollout" / "lock"


def write_lock(tmp: Path, name: str, text: str, age: float = 0.0) -> None:
    path = lock_file(tmp, name)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    if age:
        os.utime(path, (time.time() - age, time.time() - age))


def other_holder(**changes: Any) -> str:
    doc = {
        "run_id": "run-b", "operator": "bob", "controller": "ci-2", "pid": 4242,
        "started": time.time(), "version": "v2", **changes,
    }  # fmt: skip
    return json.dumps(doc)


class Recorder:
    def __init__(self) -> None:
        self.taken: list[str] = []
        self.broken: list[FoundLock] = []
        self.lost: list[FoundLock] = []
        self.lost_event = threading.Event()
        self.unreachable: dict[str, str] = {}

    def events(self) -> LockEvents:
        def lost(found: FoundLock) -> None:
            self.lost.append(found)
            self.lost_event.set()

        return LockEvents(self.taken.extend, self.broken.append, lost,
                          self.unreachable.__setitem__)


# ---- the host side: one action at a time on one lock file


def test_take_writes_the_lock_whole_with_a_heartbeat(tmp_path: Path) -> None:
    path = str(tmp_path / "lock")
    assert hostlock.act("take", path, {"run_id": "a"}, None) == {"ok": True, "note": "taken"}
    doc = json.loads(Path(path).read_text())
    assert doc["run_id"] == "a" and isinstance(doc["heartbeat"], float)
    assert os.listdir(tmp_path) == ["lock"], "no temporary file is left beside the lock"


def test_another_run_is_refused_and_shown_the_lock_as_found(tmp_path: Path) -> None:
    path = str(tmp_path / "lock")
    hostlock.act("take", path, {"run_id": "a"}, None)
    before = Path(path).read_bytes()
    out = hostlock.act("take", path, {"run_id": "b"}, None)
    assert out["ok"] is False and json.loads(out["lock"]["text"])["run_id"] == "a"
    assert out["lock"]["age"] >= 0 and len(out["lock"]["sha256"]) == 64
    assert hostlock.act("release", path, {"run_id": "b"}, None)["ok"] is False
    assert Path(path).read_bytes() == before


def test_refresh_moves_the_heartbeat_and_release_frees(tmp_path: Path) -> None:
    path = str(tmp_path / "lock")
    hostlock.act("take", path, {"run_id": "a"}, None)
    os.utime(path, (1, 1))
    assert hostlock.found(path)["age"] > 3600  # type: ignore[index]
    assert hostlock.act("refresh", path, {"run_id": "a"}, None)["ok"]
    assert hostlock.found(path)["age"] < 60  # type: ignore[index]
    assert hostlock.act("release", path, {"run_id": "a"}, None)["ok"]
    assert not Path(path).exists()


def test_break_removes_only_the_lock_that_was_judged(tmp_path: Path) -> None:
    path = str(tmp_path / "lock")
    Path(path).write_text("")
    judged = hostlock.found(path)
    Path(path).write_text(other_holder())  # someone else took it meanwhile
    out = hostlock.act("break", path, {"run_id": "a"}, judged["sha256"])  # type: ignore[index]
    assert out["ok"] is False and "run-b" in Path(path).read_text()
    now = hostlock.found(path)
    out = hostlock.act("break", path, {"run_id": "a"}, now["sha256"])  # type: ignore[index]
    assert out["ok"] and json.loads(Path(path).read_text())["run_id"] == "a"


def test_a_full_data_is_refused_in_plain_words_not_a_traceback(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def full(fd: int) -> None:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(os, "fsync", full)
    out = hostlock.lock(str(tmp_path), "take", {"run_id": "a"})
    assert out["ok"] is False and "No space left on device" in out["refused"], out
    assert os.listdir(tmp_path / "rollout") == ["lock.guard"], "no lock, no temporary file"


# ---- the controller's reading of a lock


@pytest.mark.parametrize(
    "text",
    ["", "   ", '{"run_id": "x", "oper', "null", "[]", "42",
     other_holder(pid="4242"), other_holder(pid=True), other_holder(started="yesterday"),
     json.dumps({"run_id": "x"})],
)  # fmt: skip
def test_an_unreadable_lock_names_no_holder(text: str) -> None:
    assert isinstance(parse_holder(text), str)


def test_a_lock_without_heartbeat_field_still_names_its_holder() -> None:
    holder = parse_holder(other_holder())
    assert isinstance(holder, Holder) and holder.run_id == "run-b" and holder.heartbeat is None


def test_staleness_is_the_heartbeat_age_not_the_run_age() -> None:
    old_run = parse_holder(other_holder(started=time.time() - 7 * 86400))
    assert not FoundLock("h1", old_run, age=5, sha256="x").breakable(300)
    assert FoundLock("h1", parse_holder(other_holder()), age=301, sha256="x").breakable(300)
    assert FoundLock("h1", "the lock file is empty", age=0, sha256="x").breakable(300)


# ---- one host's lock through the transport


@pytest.mark.parametrize("text", ["", '{"run_id": "run-b", "ope', "null", other_holder(pid="1")])
def test_an_unreadable_lock_is_held_by_an_unknown_holder(tmp_path: Path, text: str) -> None:
    write_lock(tmp_path, "h1", text)
    with pytest.raises(LockHeld, match="unknown holder") as refused:
        take_host_lock(context(tmp_path, "h1"), me(), LockPolicy(), lambda f: None)
    assert "--break-lock" in str(refused.value)
    assert lock_file(tmp_path, "h1").read_text() == text


def test_break_lock_breaks_an_unreadable_lock_and_says_so(tmp_path: Path) -> None:
    write_lock(tmp_path, "h1", "null")
    broken: list[FoundLock] = []
    take_host_lock(context(tmp_path, "h1"), me(), LockPolicy(break_stale=True), broken.append)
    assert [b.holder for b in broken] == ["the lock file holds null, not a holder"]
    assert json.loads(lock_file(tmp_path, "h1").read_text())["run_id"] == "run-a"


def test_a_live_holder_is_not_broken_however_old_its_run(tmp_path: Path) -> None:
    write_lock(tmp_path, "h1", other_holder(started=time.time() - 86400, controller="gone"))
    policy = LockPolicy(break_stale=True, stale_after=300)
    with pytest.raises(LockHeld, match="run run-b by bob on gone") as refused:
        take_host_lock(context(tmp_path, "h1"), me(), policy, lambda f: None)
    assert "Wait for it" in str(refused.value)
    assert "run-b" in lock_file(tmp_path, "h1").read_text()


def test_a_holder_without_heartbeat_is_stale_and_broken_on_request(tmp_path: Path) -> None:
    write_lock(tmp_path, "h1", other_holder(), age=301)
    with pytest.raises(LockHeld, match="stale"):
        take_host_lock(context(tmp_path, "h1"), me(), LockPolicy(stale_after=300), print)
    broken: list[FoundLock] = []
    policy = LockPolicy(break_stale=True, stale_after=300)
    take_host_lock(context(tmp_path, "h1"), me(), policy, broken.append)
    assert broken[0].holder.run_id == "run-b"  # type: ignore[union-attr]
    assert "run-a" in lock_file(tmp_path, "h1").read_text()


def test_a_resumed_run_keeps_its_own_lock(tmp_path: Path) -> None:
    write_lock(tmp_path, "h1", json.dumps({**json.loads(other_holder()), "run_id": "run-a"}))
    take_host_lock(context(tmp_path, "h1"), me(), LockPolicy(), lambda f: None)
    assert json.loads(lock_file(tmp_path, "h1").read_text())["operator"] == "alice"


# ---- a run's locks on the whole fleet


def test_a_run_holds_every_lock_until_its_end(tmp_path: Path) -> None:
    rec = Recorder()
    with fleet_locks(HOSTS, lambda n: context(tmp_path, n), me(), LockPolicy(), rec.events()):
        assert rec.taken == HOSTS
        assert all("run-a" in lock_file(tmp_path, h).read_text() for h in HOSTS)
    assert not any(lock_file(tmp_path, h).exists() for h in HOSTS)


def test_a_second_run_from_another_inventory_is_refused_and_takes_nothing(
    tmp_path: Path,
) -> None:
    """Any checkout, any inventory path: the hosts' locks decide. The second run, even one
    that reaches a host the first does not hold first, gives back what it took."""
    first = Recorder()
    with fleet_locks(["h3"], lambda n: context(tmp_path, n), me(), LockPolicy(), first.events()):
        second = Recorder()
        refused = pytest.raises(LockHeld, match="h3 is locked by run run-a by alice on ci-1")
        with refused, fleet_locks(HOSTS, lambda n: context(tmp_path, n), me("run-b"),
                                  LockPolicy(), second.events()):
            raise AssertionError("the second run must not get here")
        assert second.taken == []
        assert not lock_file(tmp_path, "h1").exists() and not lock_file(tmp_path, "h2").exists()
        assert "run-a" in lock_file(tmp_path, "h3").read_text()


def test_two_runs_at_once_exactly_one_goes_on(tmp_path: Path) -> None:
    """Both start together: the first host in lock order decides, whatever the timing."""
    outcomes: dict[str, str] = {}
    inside = threading.Barrier(2, timeout=60)

    def run(run_id: str) -> None:
        try:
            with fleet_locks(HOSTS, lambda n: context(tmp_path, n), me(run_id), LockPolicy(),
                             Recorder().events()):
                outcomes[run_id] = "ran"
                inside.wait()  # hold until the other has been answered
        except LockHeld:
            outcomes[run_id] = "refused"
            inside.wait()

    threads = [threading.Thread(target=run, args=(r,)) for r in ("run-a", "run-b")]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(outcomes.values()) == ["ran", "refused"]


def test_lock_order_is_by_address_and_port_not_by_name() -> None:
    a = small_host("zeta", address="10.0.0.1")
    b = small_host("alpha", address="10.0.0.2")
    assert sorted([b, a], key=lock_order) == [a, b]


def test_heartbeat_rewrites_the_locks_while_the_run_lasts(tmp_path: Path) -> None:
    rec = Recorder()
    policy = LockPolicy(stale_after=1.2)
    with fleet_locks(["h1"], lambda n: context(tmp_path, n), me(), policy, rec.events()):
        first = json.loads(lock_file(tmp_path, "h1").read_text())["heartbeat"]
        deadline = time.monotonic() + 60
        while json.loads(lock_file(tmp_path, "h1").read_text())["heartbeat"] == first:
            assert time.monotonic() < deadline, "the heartbeat never came"
            time.sleep(0.05)


def test_a_lock_broken_by_another_run_is_reported_lost(tmp_path: Path) -> None:
    rec = Recorder()
    policy = LockPolicy(stale_after=1.2)
    with fleet_locks(HOSTS, lambda n: context(tmp_path, n), me(), policy, rec.events()) as held:
        write_lock(tmp_path, "h2", other_holder())
        assert rec.lost_event.wait(60)
        assert held.lost == {"h2"} and rec.lost[0].host == "h2"
    assert "run-b" in lock_file(tmp_path, "h2").read_text(), "their lock is not released by us"


def test_an_unreachable_host_is_left_alone_and_the_rest_locked(tmp_path: Path) -> None:
    def open_host(name: str) -> HostContext:
        if name == "h2":
            raise TransportError("cannot reach root@127.0.0.1:2201")
        return context(tmp_path, name)

    rec = Recorder()
    with fleet_locks(HOSTS, open_host, me(), LockPolicy(), rec.events()) as held:
        assert isinstance(held, FleetLocks)
        assert rec.taken == ["h1", "h3"] and "cannot reach" in held.unreachable["h2"]
