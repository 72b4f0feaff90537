"""The engine tests' fake host: the simulated host of `inv bench --simulate`
(rollout.bench.simhost), one implementation for both, with its wire at rest (no latency,
no failures); and CannedStream, a host's stream that says given lines."""

from __future__ import annotations

from rollout.bench.simhost import (
    CANNED,
    CURRENT,
    RELEASES,
    ROOT,
    SPECS,
    STAGING,
    bad_call,
    canned,
    sha,
    shape_problem,
)
from rollout.bench.simhost import SimHost as FakeHost
from rollout.transport.base import Stream

__all__ = ["CANNED", "CURRENT", "RELEASES", "ROOT", "SPECS", "STAGING", "CannedStream",
           "FakeHost", "bad_call", "canned", "sha", "shape_problem"]


class CannedStream(Stream):
    """A host's stream that says these lines, one a readline, then ends; `stderr`: what
    the host wrote there."""

    def __init__(self, lines: list[str], stderr: bytes = b"") -> None:
        self.lines = list(lines)
        self.stderr = stderr

    def readline(self, timeout: float) -> str:
        return self.lines.pop(0) if self.lines else ""

    def write(self, text: str) -> bool:
        return True

    @property
    def ended(self) -> bool:
        return not self.lines

    def close(self) -> None:
        self.lines = []
