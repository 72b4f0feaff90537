"""The controller's half of the host agent (rollout/host/scripts/agent.py).

One agent per connection, on a session channel of its own: each command is one JSON line
out and one back on that channel, where a plain exec opens a channel, starts a shell and,
for a host script, a new python3 that imports and compiles it all again. What a command
does and what it answers are the same either way (the RunResult of `sh -c COMMAND`).
"""

from __future__ import annotations

import functools
import hashlib
import itertools
import json
import shlex
import threading
import time
from collections.abc import Mapping, Sequence
from typing import Any

from rollout.errors import HostAnswerError
from rollout.host.scripts import bootstrap, script_text, sized
from rollout.jsontypes import JSON
from rollout.secrets import head
from rollout.transport.base import RunResult, Stream, script_command
from rollout.transport.failures import lost

BOOTSTRAP = bootstrap("agent.py")
START_WAIT = 30.0  # seconds for the agent's first line
ANSWER_SLACK = 30.0  # seconds an answer may lag behind its command's own timeout
ANSWER_CAP = 16 << 20  # bytes of one answer line (rollout.transport.channel.LINE_CAP)


def agent_command() -> tuple[str, bytes]:
    """The command that starts an agent, and what goes on its stdin first."""
    return f"python3 -c {shlex.quote(BOOTSTRAP)}", sized(script_text("agent"))


@functools.lru_cache(maxsize=64)
def source_sha256(source: str) -> str:
    """A script's sha256, once per process: the same few scripts go to every host."""
    return hashlib.sha256(source.encode()).hexdigest()


class HostAgent:
    """Commands through one agent, one at a time (a host's steps run one at a time)."""

    def __init__(self, name: str, stream: Stream) -> None:
        self.name = name
        self.stream = stream
        self._ids = itertools.count(1)
        self._lock = threading.RLock()  # held for each command; call_if_free holds it around one

    @classmethod
    def start(cls, name: str, stream: Stream | None) -> HostAgent | None:
        """The agent on `stream` once it said it runs; None when it did not (no python3)."""
        if stream is None:
            return None
        first = stream.readline(START_WAIT)
        try:
            hello = json.loads(first)
        except ValueError:
            hello = None
        if not isinstance(hello, dict) or "agent" not in hello:
            stream.close()
            return None
        return cls(name, stream)

    def shell(self, command: str, timeout: float | None, stdin: str | None) -> RunResult:
        answer = self._call({"sh": command, "stdin": stdin or "", "timeout": timeout}, timeout)
        return self._result(command, answer)

    def script(self, source: str, args: Sequence[str], timeout: float | None,
               before: str = "") -> RunResult:
        """A host script in a forked child of the agent."""
        sha = source_sha256(source)
        request: dict[str, Any] = {"script": True, "sha": sha, "args": list(args),
                                   "before": before, "timeout": timeout}
        return self._result(script_command(args, before), self._compiled(request, source))

    def call(self, source: str, call: str, kwargs: Mapping[str, JSON],
             timeout: float | None) -> RunResult:
        """One function of a host module, run by the agent in a forked child, killed at
        `timeout`; an action declared in_agent (ops.in_agent) runs in the agent's own process
        instead and its `timeout` is not applied there (the answer's wait still is)."""
        sha = source_sha256(source)
        request: dict[str, Any] = {"call": call, "kwargs": dict(kwargs), "sha": sha,
                                   "timeout": timeout}
        return self._result(f"call {call}", self._compiled(request, source))

    def call_if_free(self, source: str, call: str, kwargs: Mapping[str, JSON],
                     timeout: float | None, wait: float = 0.0) -> RunResult | None:
        """call(), or None where the agent is still running another command after `wait`
        seconds."""
        free = self._lock.acquire(timeout=wait) if wait > 0 else self._lock.acquire(False)
        if not free:
            return None
        try:
            return self.call(source, call, kwargs, timeout)
        finally:
            self._lock.release()

    def _compiled(self, request: dict[str, Any], source: str) -> dict[str, Any]:
        """The answer to a request that names its script by sha256 alone; the source goes
        only where the agent asks for it ("unknown": neither compiled on this connection
        nor in the host's code cache), once per script and host."""
        answer = self._call(request, request.get("timeout"))
        if "unknown" in answer:
            answer = self._call({**request, "source": source}, request.get("timeout"))
        return answer

    def _call(self, request: dict[str, Any], timeout: float | None) -> dict[str, Any]:
        with self._lock:
            request_id = next(self._ids)
            if not self.stream.write(json.dumps({"id": request_id, **request}) + "\n"):
                raise lost(self.name, _what(request), why="the host agent is gone")
            wait = None if timeout is None else timeout + ANSWER_SLACK
            deadline = None if wait is None else time.monotonic() + wait
            while True:
                left = 3600.0 if deadline is None else max(0.0, deadline - time.monotonic())
                line = self.stream.readline(left)
                if line:
                    answer = self._parse(line)
                    if answer.get("id") == request_id:
                        return answer
                    continue
                if deadline is not None or self.stream.ended:
                    raise lost(self.name, _what(request),
                               why="the host agent stopped answering")

    def _parse(self, line: str) -> dict[str, Any]:
        """One answer line: a JSON object, or HostAnswerError naming what came instead."""
        try:
            answer = json.loads(line)
        except (ValueError, RecursionError) as e:
            raise HostAnswerError(f"{self.name}: the host agent said {line[:200]!r}") from e
        if not isinstance(answer, dict):
            raise HostAnswerError(f"{self.name}: the host agent answered "
                                  f"{type(answer).__name__}, not an object")
        return answer

    def _result(self, command: str, answer: dict[str, Any]) -> RunResult:
        """The RunResult an answer gives; HostAnswerError when a field has the wrong type or
        the host said its answer was over the cap."""
        if "oversized" in answer:
            raise HostAnswerError(
                f"{self.name}: the answer to `{head(command, 80)}` was over the "
                f"{ANSWER_CAP >> 20} MiB cap ({_field(answer, 'oversized')}): refused")
        exit_code: Any = answer.get("exit")
        timed_out = answer.get("timed_out", False)
        stdout, stderr = answer.get("stdout", ""), answer.get("stderr", "")
        bad = [k for k, v, t in (("exit", exit_code, int), ("timed_out", timed_out, bool),
                                 ("stdout", stdout, str), ("stderr", stderr, str))
               if not isinstance(v, t) or (t is int and isinstance(v, bool))]
        if bad:
            raise HostAnswerError(
                f"{self.name}: the host agent's answer to `{head(command, 80)}` is malformed: "
                + ", ".join(f"{k} is {_field(answer, k)}" for k in bad))
        if timed_out:
            return RunResult(command, 124, stdout, stderr + "\n(timed out)")
        return RunResult(command, exit_code, stdout, stderr)

    def close(self) -> None:
        self.stream.close()


def _what(request: dict[str, Any]) -> str:
    """What a request asked, for a lost connection's words."""
    if "call" in request:
        return str(request["call"])
    if "sh" in request:
        return f"`{head(str(request['sh']), 60)}`"
    return "a host script"


def _field(answer: dict[str, Any], key: str) -> str:
    """A field of a host's answer, for a message: its type and a short, escaped repr."""
    value = answer.get(key)
    return f"{type(value).__name__} {ascii(value)[:40]}"
