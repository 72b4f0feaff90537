"""The counting transport counts what the controller really sends: a host agent keeps a
script or module it got once on this connection, so later calls send only its sha256;
without an agent every call sends the source again."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from rollout.jsontypes import JSON
from rollout.transport.base import RunResult, Stream, Transport
from rollout.transport.counting import CountingTransport, SentBytes

SOURCE = "x = 1\n" * 1000  # 6,000 bytes


class Quiet(Transport):
    """A transport that answers every command with nothing, with or without an agent."""

    def __init__(self, agent: bool) -> None:
        self.name = "h1"
        self.agent = agent

    def run(self, command: str, timeout: float | None = None,
            stdin: str | None = None) -> RunResult:
        return RunResult(command, 0, "", "")

    def call(self, source: str, call: str, kwargs: Mapping[str, JSON],
             timeout: float | None = None) -> RunResult:
        return RunResult(call, 0, "{}", "")

    def run_script(self, source: str, args: Sequence[str], timeout: float | None = None,
                   before: str = "") -> RunResult:
        return RunResult("script", 0, "", "")

    def put(self, local_path: str, remote_path: str, resume: bool = False,
            progress: object = None) -> None:
        raise NotImplementedError

    def get(self, remote_path: str, local_path: str) -> None:
        raise NotImplementedError

    def open_stream(self, command: str, stdin: bytes) -> Stream | None:
        return None

    def keeps_sources(self) -> bool:
        return self.agent


def sent_by(transport: Quiet) -> int:
    sent = SentBytes()
    counting = CountingTransport(transport, sent)
    for _ in range(3):
        counting.call(SOURCE, "stop", {"root": "/data"})
        counting.run_script(SOURCE, ["--root", "/data"])
    return sent.by_host["h1"]


def test_an_agent_gets_each_source_once_then_its_sha256() -> None:
    with_agent = sent_by(Quiet(agent=True))
    assert len(SOURCE) <= with_agent < 2 * len(SOURCE)


def test_without_an_agent_every_call_sends_the_source() -> None:
    assert sent_by(Quiet(agent=False)) >= 6 * len(SOURCE)
