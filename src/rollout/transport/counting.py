"""A transport that counts what the controller sends through it: commands, their stdin and
the files it puts (the payload; SSH's own framing is not counted)."""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Mapping, Sequence

from rollout.jsontypes import JSON
from rollout.transport.agent import source_sha256
from rollout.transport.base import LocalFile, Progress, RunResult, Stream, Transport, local_size


class SentBytes:
    """Bytes sent per host, shared by the counting transports of one run."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.by_host: Counter[str] = Counter()

    def add(self, host: str, count: int) -> None:
        with self._lock:
            self.by_host[host] += count


class CountingTransport(Transport):
    def __init__(self, inner: Transport, sent: SentBytes) -> None:
        self.inner = inner
        self.name = inner.name
        self.sent = sent
        self._kept: set[str] = set()  # sources the host's agent already has

    def _source_size(self, source: str) -> int:
        """What sending `source` costs: all of it, or only its sha256 where the host's
        agent got it before on this connection (as HostAgent sends it)."""
        sha = source_sha256(source)
        if sha in self._kept and self.inner.keeps_sources():
            return len(sha)
        return len(source.encode())

    def _sent_source(self, source: str) -> None:
        if self.inner.keeps_sources():
            self._kept.add(source_sha256(source))

    def run(
        self, command: str, timeout: float | None = None, stdin: str | None = None
    ) -> RunResult:
        self.sent.add(self.name, len(command.encode()) + len((stdin or "").encode()))
        return self.inner.run(command, timeout=timeout, stdin=stdin)

    def run_script(self, source: str, args: Sequence[str], timeout: float | None = None,
                   before: str = "") -> RunResult:
        size = self._source_size(source) + sum(len(a.encode()) for a in args) + len(before.encode())
        self.sent.add(self.name, size)
        result = self.inner.run_script(source, args, timeout=timeout, before=before)
        self._sent_source(source)
        return result

    def call(self, source: str, call: str, kwargs: Mapping[str, JSON],
             timeout: float | None = None) -> RunResult:
        self.sent.add(self.name, self._source_size(source) + len(repr(kwargs).encode()))
        result = self.inner.call(source, call, kwargs, timeout)
        self._sent_source(source)
        return result

    def call_beside(self, source: str, call: str, kwargs: Mapping[str, JSON],
                    timeout: float | None = None, wait: float = 0.0) -> RunResult:
        self.sent.add(self.name, self._source_size(source) + len(repr(kwargs).encode()))
        return self.inner.call_beside(source, call, kwargs, timeout, wait)

    def put(self, local_path: LocalFile, remote_path: str, resume: bool = False,
            progress: Progress | None = None) -> None:
        self.sent.add(self.name, local_size(local_path) + len(remote_path.encode()))
        if progress is None:
            return self.inner.put(local_path, remote_path, resume)
        return self.inner.put(local_path, remote_path, resume, progress)

    def put_and_digest(self, local_path: LocalFile, remote_path: str, mode: int = 0o644,
                       progress: Progress | None = None) -> str:
        self.sent.add(self.name, local_size(local_path) + len(remote_path.encode()))
        return self.inner.put_and_digest(local_path, remote_path, mode, progress)

    def get(self, remote_path: str, local_path: str) -> None:
        self.sent.add(self.name, len(remote_path.encode()))
        self.inner.get(remote_path, local_path)

    def open_stream(self, command: str, stdin: bytes) -> Stream | None:
        self.sent.add(self.name, len(command.encode()) + len(stdin))
        return self.inner.open_stream(command, stdin)

    def keeps_sources(self) -> bool:
        return self.inner.keeps_sources()

    def close(self) -> None:
        self.inner.close()
