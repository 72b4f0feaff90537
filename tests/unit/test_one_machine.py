"""One machine, one entry (issue 18): a host is known by the id rollout keeps in its
/data (<root>/rollout/host-id), read or made in the lock's own round trip. Two inventory
entries that reach the same machine are both refused before anything changes there."""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

import pytest
from contexts import AgentTransport, host_context, small_host
from fakehost import FakeHost
from test_locks import Recorder, lock_file, me

from rollout.engine.locks import LockPolicy, fleet_locks, same_machines
from rollout.host.layout import Layout
from rollout.host.scripts.actions import lock as hostlock
from rollout.steps.base import HostContext


@pytest.fixture(autouse=True)
def _fake_put_with_progress(monkeypatch: pytest.MonkeyPatch) -> None:
    """The fake host's put, as the transport's now is (a progress callback)."""
    real = FakeHost.put

    def put(self: FakeHost, local_path: str, remote_path: str, resume: bool = False,
            progress: Any = None) -> None:
        real(self, local_path, remote_path, resume)

    monkeypatch.setattr(FakeHost, "put", put)

def context(tmp: Path, name: str, folder: str) -> HostContext:
    """Entry `name` whose /data is tmp/folder: two entries may share one folder."""
    return host_context(small_host(name, port=2200), AgentTransport(name),
                        Layout(str(tmp / folder)))


def test_the_host_id_is_made_once_and_read_after(tmp_path: Path) -> None:
    made = hostlock.host_id(str(tmp_path))
    assert re.fullmatch(r"[0-9a-f]{32}", made)
    assert hostlock.host_id(str(tmp_path)) == made
    assert sorted(os.listdir(tmp_path)) == ["host-id"]  # no temporary left behind


def test_a_link_or_garbage_in_place_of_the_id_is_refused(tmp_path: Path) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.write_text("0" * 32)
    state = tmp_path / "state"
    state.mkdir()
    (state / "host-id").symlink_to(elsewhere)
    assert "link" in hostlock.identify(str(state))["host_id_error"]
    (state / "host-id").unlink()
    (state / "host-id").write_text("not an id at all\n")
    assert "holds no host id" in hostlock.identify(str(state))["host_id_error"]
    (state / "host-id").unlink()
    (state / "dangling").symlink_to(tmp_path / "nowhere")
    os.rename(state / "dangling", state / "host-id")
    assert "host_id_error" in hostlock.identify(str(state))
    assert not (tmp_path / "nowhere").exists()  # never created through the link


def test_same_machines_names_the_other_entries() -> None:
    refused = same_machines({"a": "1" * 32, "b": "2" * 32, "c": "1" * 32})
    assert sorted(refused) == ["a", "c"]
    assert "inventory entry c" in refused["a"] and "inventory entry a" in refused["c"]
    assert same_machines({"a": "1" * 32, "b": "2" * 32}) == {}


def test_two_entries_reaching_one_machine_are_both_refused(tmp_path: Path) -> None:
    rec = Recorder()
    names = {"h1": "one", "h2": "two", "h1-again": "one"}
    with fleet_locks(list(names), lambda n: context(tmp_path, n, names[n]), me(), LockPolicy(),
                     rec.events()) as locks:
        assert sorted(locks.held) == ["h2"]
        assert sorted(locks.refused) == ["h1", "h1-again"]
        assert "h1-again" in locks.refused["h1"] and "h1" in rec.unreachable["h1-again"]
        assert not lock_file(tmp_path, "one").exists()  # its lock given back at once
        assert lock_file(tmp_path, "two").exists()
    assert (tmp_path / "one" / "rollout" / "host-id").read_text().strip() == locks.ids["h1"]


def test_a_host_without_an_id_is_left_alone_and_unlocked(tmp_path: Path) -> None:
    (tmp_path / "bad" / "rollout").mkdir(parents=True)
    (tmp_path / "bad" / "rollout" / "host-id").write_text("garbage")
    rec = Recorder()
    names = {"good": "good", "bad": "bad"}
    with fleet_locks(list(names), lambda n: context(tmp_path, n, names[n]), me(), LockPolicy(),
                     rec.events()) as locks:
        assert list(locks.held) == ["good"]
        assert "cannot tell which machine this is" in locks.unreachable["bad"]
        assert not lock_file(tmp_path, "bad").exists()


def _lock_on(host: Any, folder: Path) -> Any:
    """The fake host's calls, but its lock call runs for real with `folder` as /data."""
    real, local = host.call, AgentTransport(host.name)

    def call(source: str, name: str, kwargs: Any, timeout: float | None = None) -> Any:
        if name == "ops.lock":
            return local.call(source, name, {**kwargs, "root": str(folder)}, timeout)
        return real(source, name, kwargs, timeout)

    return call


@pytest.mark.parametrize("same", [True, False])
def test_the_engine_refuses_both_entries_before_any_change(tmp_path: Path, same: bool) -> None:
    from test_engine import Fleet

    from rollout.engine.locks import holder_for

    fleet = Fleet(tmp_path, ["h1", "h2", "h3"])
    folders = {"h1": "m1", "h2": "m2", "h3": "m1" if same else "m3"}
    for n, host in fleet.hosts.items():  # the lock script runs for real, on each folder
        host.call = _lock_on(host, tmp_path / folders[n])  # type: ignore[method-assign]
    summary = fleet.roll("bbbbbbbbbbbb", holder=holder_for("r1", "op", "ctl", "v"))
    if same:
        assert summary.exit_code == 1
        for name in ("h1", "h3"):
            assert summary.outcomes[name].status == "failed"
            assert "same machine" in summary.outcomes[name].reason
            assert not fleet.hosts[name].sent, f"{name} was touched"


def test_a_lock_taken_whose_answer_could_not_be_read_is_given_back(tmp_path: Path) -> None:
    """The host took the lock, but its answer was malformed: the run does not hold it, so it
    is given back at once (never left to block the next run)."""
    from rollout.errors import HostAnswerError

    ctx = context(tmp_path, "h1", "one")
    real = ctx.transport.call

    def garbled(source: str, name: str, kwargs: Any, timeout: float | None = None) -> Any:
        result = real(source, name, kwargs, timeout)
        if kwargs.get("do") == "take":
            raise HostAnswerError("h1: the host agent's answer is malformed: exit is str")
        return result

    ctx.transport.call = garbled  # type: ignore[method-assign]
    rec = Recorder()
    with fleet_locks(["h1"], lambda n: ctx, me(), LockPolicy(), rec.events()) as locks:
        assert not locks.held and "malformed" in locks.unreachable["h1"]
    assert not lock_file(tmp_path, "one").exists()
