"""The transport interface every step talks through. Steps never import paramiko."""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass

from rollout.errors import CommandFailed


@dataclass(frozen=True)
class RunResult:
    command: str
    exit_code: int
    stdout: str
    stderr: str

    @property
    def ok(self) -> bool:
        return self.exit_code == 0

    def check(self) -> RunResult:
        if not self.ok:
            raise CommandFailed(self.command, self.exit_code, self.stdout, self.stderr)
        return self


class Transport(ABC):
    """A connection to one host. Opened once, reused by every step of that host."""

    name: str

    @abstractmethod
    def run(
        self, command: str, timeout: float | None = None, stdin: str | None = None
    ) -> RunResult:
        """Run a shell command on the host; never raises for a non-zero exit."""

    @abstractmethod
    def put(self, local_path: str, remote_path: str, resume: bool = False) -> None:
        """Copy a local file to the host. `resume`: append to what a partial copy left."""

    @abstractmethod
    def get(self, remote_path: str, local_path: str) -> None:
        """Copy a file from the host."""

    def close(self) -> None:  # noqa: B027 - optional hook
        """Release the connection."""
