"""One root exception, typed per layer.

User mistakes exit 2 and name the file, line and key. Host failures are results, not
exceptions that unwind a run; `HostError` only travels inside one host's step.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from rollout.masking import redact


class RolloutError(Exception):
    """Root of every error rollout raises on purpose. `kind`: its kind in
    rollout.failures.FAILURES (the operator's words and the fix), "" for none."""

    exit_code = 1
    kind = ""


@dataclass
class Location:
    file: str
    line: int | None = None
    key: str | None = None

    def __str__(self) -> str:
        where = self.file
        if self.line is not None:
            where += f":{self.line}"
        if self.key:
            where += f": {self.key}"
        return where


class UserError(RolloutError):
    """Bad input from the user: a file, a flag, a value. Exit code 2."""

    exit_code = 2

    def __init__(self, message: str, location: Location | None = None) -> None:
        self.message = message
        self.location = location
        super().__init__(f"{location}: {message}" if location else message)


class ConfigError(UserError):
    """An inventory or playbook that does not validate."""


class EnvironmentProblem(RolloutError):
    """This machine lacks something rollout needs (Docker engine, ssh, permissions)."""

    exit_code = 3


class TransportError(RolloutError):
    """A host could not be reached, or the connection dropped."""


class HostAnswerError(TransportError):
    """A host answered with something rollout cannot take: malformed, oversized or late.
    It fails that host alone, with the reason; the rest of the fleet goes on."""


class HostKeyError(TransportError):
    """A host key is unknown (and the policy refuses it) or has changed."""


class CommandFailed(RolloutError):
    """A remote command exited non-zero; carries its result."""

    def __init__(self, command: str, exit_code: int, stdout: str, stderr: str) -> None:
        self.command = command
        self.exit_status = exit_code
        self.stdout = stdout
        self.stderr = stderr
        tail = "\n".join(str(redact((stderr or stdout).strip())).splitlines()[-5:])
        super().__init__(f"`{command}` exited {exit_code}: {tail}")


class StepFailed(RolloutError):
    """A step could not reach its goal on a host. Retryable when `retryable` is true."""

    def __init__(
        self,
        message: str,
        retryable: bool = True,
        output: str = "",
        data: dict[str, Any] | None = None,
    ) -> None:
        self.retryable = retryable
        self.output = output
        self.data = data or {}  # evidence for the step's event (plain, JSON-able)
        super().__init__(message)


class HandedOver(StepFailed):
    """The host's guard took the host over (the controller lost its tether): no command
    may follow."""


class LockHeld(RolloutError):
    """Another rollout holds a lock."""

    exit_code = 4


class InternalError(RolloutError):
    """A bug in rollout itself. Please report it."""

    exit_code = 70
