"""Each host's answers are hostile data (issue 18): a malformed, oversized or late answer
fails that host alone, with a clear reason; the rest of the fleet goes on, and `status`
shows such a host as unknown, never a crash (exit 70)."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fakehost import CannedStream, FakeHost
from test_engine import Fleet
from test_hostside_agent import start_agent

from rollout.commands import status
from rollout.commands.diagnose import HostEvidence
from rollout.engine.locks import FoundLock
from rollout.errors import HostAnswerError
from rollout.host.facts import HostFacts
from rollout.transport import channel
from rollout.transport.agent import HostAgent


@pytest.fixture(autouse=True)
def _fake_put_with_progress(monkeypatch: pytest.MonkeyPatch) -> None:
    """The fake host's put, as the transport's now is (a progress callback)."""
    real = FakeHost.put

    def put(self: FakeHost, local_path: str, remote_path: str, resume: bool = False,
            progress: Any = None) -> None:
        real(self, local_path, remote_path, resume)

    monkeypatch.setattr(FakeHost, "put", put)

def answer(**fields: Any) -> str:
    return json.dumps({"id": 1, **fields})


@pytest.mark.parametrize("line", [
    answer(exit="zero", stdout="", stderr=""),
    answer(exit=[0], stdout="", stderr=""),
    answer(exit=True, stdout="", stderr=""),
    answer(exit=0, stdout={"a": 1}, stderr=""),
    answer(exit=0, stdout="", stderr=7),
    answer(exit=0, stdout="", stderr="", timed_out="yes"),
    answer(oversized="stdout over 16777216 bytes"),
    "[" * 200_000 + "]" * 200_000,
    "7",
    "\x1b]0;pwned\x07 not json",
])
def test_a_malformed_agent_answer_is_a_host_answer_error(line: str) -> None:
    agent = HostAgent("h1", CannedStream([line]))
    with pytest.raises(HostAnswerError) as e:
        agent.shell("true", 5, None)
    assert str(e.value).startswith("h1: ")
    assert "\x1b" not in str(e.value)


def test_a_well_formed_answer_still_reads() -> None:
    agent = HostAgent("h1", CannedStream([answer(exit=3, stdout="o", stderr="e")]))
    r = agent.shell("true", 5, None)
    assert (r.exit_code, r.stdout, r.stderr) == (3, "o", "e")


class EndlessChannel:
    """A paramiko channel that sends `total` bytes with no newline, 64 KiB at a time."""

    def __init__(self, total: int, stream: str = "stdout") -> None:
        self.left, self.sent, self.stream = total, 0, stream
        self.closed, self.eof_received = False, False

    def _chunk(self) -> bytes:
        n = min(self.left, 1 << 16)
        self.left -= n
        self.sent += n
        self.eof_received = self.left == 0
        return b"x" * n

    def recv_ready(self) -> bool:
        return self.stream == "stdout" and self.left > 0

    def recv(self, size: int) -> bytes:
        return self._chunk()

    def recv_stderr_ready(self) -> bool:
        return self.stream == "stderr" and self.left > 0

    def recv_stderr(self, size: int) -> bytes:
        return self._chunk()

    def exit_status_ready(self) -> bool:
        return self.left == 0

    def recv_exit_status(self) -> int:
        return 0

    def fileno(self) -> int:
        return sys.stdin.fileno()


def test_a_line_over_the_cap_is_refused_while_reading() -> None:
    ch = EndlessChannel(channel.LINE_CAP + (8 << 20))
    stream = channel.ChannelStream(ch)  # type: ignore[arg-type]
    with pytest.raises(HostAnswerError, match="16 MiB"):
        stream.readline(30)
    assert ch.sent <= channel.LINE_CAP + (1 << 17)  # it stopped reading at the cap


@pytest.mark.parametrize("which", ["stdout", "stderr"])
def test_a_command_output_over_the_cap_stops_the_read(which: str) -> None:
    ch = EndlessChannel(channel.OUTPUT_CAP + (8 << 20), which)
    out = channel.ChannelOutput()
    channel._collect(ch, out, None)  # type: ignore[arg-type]
    assert out.oversized == which
    assert ch.sent <= channel.OUTPUT_CAP + (1 << 17)
    assert len(out.stdout) <= channel.OUTPUT_CAP and len(out.stderr) <= channel.OUTPUT_CAP


@pytest.fixture
def real_agent(tmp_path: Path) -> Iterator[HostAgent]:
    started, _ = start_agent(tmp_path / "cache")
    yield started
    started.close()


def test_the_host_agent_refuses_an_output_over_the_cap(real_agent: HostAgent) -> None:
    """150 MiB printed by a command never reaches the controller: the agent answers that it
    was over the cap, and the controller fails the host with that reason."""
    with pytest.raises(HostAnswerError, match="over the 16 MiB cap"):
        real_agent.shell("head -c 157286400 /dev/zero", 60, None)
    with pytest.raises(HostAnswerError, match="over the 16 MiB cap"):  # escapes: 6x longer
        real_agent.script("import sys; sys.stdout.write('\\x01' * (4 << 20))", [], 60)
    assert real_agent.shell("echo alive", 30, None).stdout == "alive\n"  # in step again


@pytest.mark.parametrize("raw", [
    {"releases": 5, "cuzk_processes": [{"pid": 1, "ancestors": 7}]},
    {"port_owners": {"²": [], "99999999999": [], "9820": [{"pid": 3}]}},
    {"daemon": {"uptime_secs": 10**400, "started_at": float("nan")},
     "releases": [{"id": "abc", "mtime": 10**400}]},
    {"errors": {"x" * 10_000: ["y"] * 10}, "host_id": 5},
    ["not", "an", "object"],
])
def test_hostfacts_parse_never_raises(raw: Any) -> None:
    facts = HostFacts.parse(raw)
    assert facts.daemon.uptime_secs is None or facts.daemon.uptime_secs < 1e300
    assert all(port <= 65535 for port in facts.port_owners)


def test_a_lock_answer_with_an_ill_typed_age_is_read() -> None:
    for age in ("old", None, 10**400, float("nan"), -5, True):
        assert FoundLock.read("h", {"text": "{}", "age": age, "sha256": 7}).age == 0.0


def test_one_host_whose_answer_breaks_rollout_fails_alone(tmp_path: Path) -> None:
    """Whatever one host's answer makes rollout raise fails that host; the others end
    validated and the run exits 1, not 70."""
    fleet = Fleet(tmp_path, ["h1", "h2", "h3"])
    bad = fleet.hosts["h2"]
    real = bad.call

    def hostile(source: str, call: str, kwargs: Any, timeout: float | None = None) -> Any:
        if call == "ops.facts":
            raise ValueError("a fact field of the wrong type")
        return real(source, call, kwargs, timeout)

    bad.call = hostile  # type: ignore[method-assign]
    summary = fleet.roll("bbbbbbbbbbbb")
    assert summary.exit_code == 1, summary.aborted
    assert summary.outcomes["h2"].status == "failed"
    assert "could not take what this host answered" in summary.outcomes["h2"].reason
    assert {summary.outcomes[h].status for h in ("h1", "h3")} == {"validated"}


def test_status_shows_a_host_with_an_unreadable_answer_as_unknown() -> None:
    bad = HostEvidence("h2", False, error="h2: the host agent said 'garbage'", unknown=True)
    odd = HostEvidence("h3", True, HostFacts.parse({}), {"release": 5, "log": 7, "kernel": 9})
    rows = [status.host_row(ev) for ev in (bad, odd)]
    assert rows[0]["state"] == "unknown" and "garbage" in rows[0]["error"]
    assert rows[1]["state"] in ("unknown", "stopped")
    status.print_status(rows, as_json=False)
