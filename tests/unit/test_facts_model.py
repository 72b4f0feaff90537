"""HostFacts: ops.facts's report parsed in one place; hostile or missing fields become None;
a host that gives no facts fails its step."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import pytest
from contexts import host_context
from fakehost import FakeHost

from rollout.errors import StepFailed
from rollout.host.facts import HostFacts
from rollout.transport.base import RunResult


def test_parses_the_report_ops_facts_gives() -> None:
    f = HostFacts.parse({
        "outcome": "read", "reason": "host facts",
        "time": 10.5, "python": "3.11.2", "held": False, "current_release": "abc",
        "cgroup": {"memory": {"usage": 5, "limit": 9, "source": "cgroup-v2"}},
        "meminfo": {"total": 100, "available": 50},
        "daemon": {"state": "running", "pid": 7, "exe": "/data/releases/abc/cuzk-daemon"},
        "supervisor": {"pid": 3, "alive": True, "state": "running"},
        "releases": [{"id": "abc", "mtime": 1.0, "has_daemon": True}],
        "disk": {"free_bytes": 1 << 30}, "root_writable": True,
    })
    assert (f.memory.usage, f.memory.limit, f.memory.meminfo_total) == (5, 9, 100)
    assert f.daemon.running and f.daemon.pid == 7 and f.supervisor.alive
    assert f.release_ids == {"abc"} and f.free_bytes == 1 << 30
    assert f.serves("abc", "/data/releases/abc")
    assert not f.serves("abd", "/data/releases/abd")


def test_hostile_values_become_none_never_an_exception() -> None:
    f = HostFacts.parse({
        "daemon": {"state": ["x"], "pid": "7; rm -rf /", "exe": 3},
        "cgroup": "nope", "held": "yes", "releases": [{"id": 5}, "x", {"id": "ok"}],
        "disk": [], "errors": {"cgroup": 1}, "last_exit": "not a record",
        "current_release": "../../etc", "previous_release": "-rf",
    })
    assert f.current_release is None and f.previous_release is None
    assert f.daemon.state == "none" and f.daemon.pid is None and f.daemon.exe is None
    assert f.memory.limit is None and f.held is False
    assert f.release_ids == {"ok"} and f.free_bytes is None
    assert f.errors == {"cgroup": "1"} and f.last_exit is None
    assert HostFacts.parse(None) == HostFacts()


def test_a_held_daemon_does_not_serve() -> None:
    f = HostFacts.parse({"held": True, "current_release": "abc",
                         "daemon": {"state": "running", "exe": "/data/releases/abc/cuzk-daemon"}})
    assert not f.serves("abc", "/data/releases/abc")


def test_the_facts_are_one_ops_call_with_their_digests_and_ports() -> None:
    host = FakeHost("h1", files={"/data/x": "ab" * 32})
    events: list[Any] = []
    facts = host_context(transport=host, emit=lambda *a, **k: events.append(a)).facts("/data/x")
    (sent,) = host.sent
    assert sent.startswith("call ops.facts ")
    kwargs = json.loads(sent.removeprefix("call ops.facts "))
    assert kwargs["root"] == "/data" and kwargs["digests"] == ["/data/x"]
    assert kwargs["ports"] and all(isinstance(p, int) for p in kwargs["ports"])
    assert facts.digest("/data/x") == "ab" * 32 and events == []  # a read, not a plan's call


@pytest.mark.parametrize("answer", ['{"outcome": "refused", "reason": "no"}', "[1, 2]",
                                    "not json", '{"time": 1.0}'])
def test_a_host_that_gives_no_facts_fails_its_step(answer: str) -> None:
    class Odd(FakeHost):
        def call(self, source: str, call: str, kwargs: Mapping[str, Any],
                 timeout: float | None = None) -> RunResult:
            return RunResult(f"call {call}", 0, answer + "\n", "")

    with pytest.raises(StepFailed, match="ops.facts on host gave no"):
        host_context(transport=Odd("h1")).facts()
