"""The transport interface every step talks through. Steps never import paramiko."""

from __future__ import annotations

import json
import os
import shlex
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass
from typing import BinaryIO

from rollout.errors import CommandFailed
from rollout.host.scripts import bootstrap, sized
from rollout.jsontypes import JSON

Progress = Callable[[int], None]  # bytes sent so far
LocalFile = str | BinaryIO
"""A controller file to send: its path, or a file the caller opened (sent from its start,
left open): the bytes the caller checked are the bytes sent."""


@contextmanager
def opened(local: LocalFile) -> Iterator[BinaryIO]:
    """`local` open for reading, at its start; a path is opened here and closed after."""
    with open(local, "rb") if isinstance(local, str) else nullcontext(local) as f:
        f.seek(0)
        yield f


def local_size(local: LocalFile) -> int:
    return os.path.getsize(local) if isinstance(local, str) else os.fstat(local.fileno()).st_size


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


def script_command(args: Sequence[str], before: str = "") -> str:
    """The shell command that runs a script on its stdin: `BEFORE && python3 - ARGS`."""
    first = f"{before} && " if before else ""
    return f"{first}python3 - {shlex.join(args)}"


def call_command(source: str, call: str, kwargs: Mapping[str, JSON]) -> tuple[str, str]:
    """A host module's function run without an agent: the command, and its stdin (the
    module, then the kwargs: never in the command line)."""
    module, _, function = call.partition(".")
    command = (f"python3 -c {shlex.quote(bootstrap(module + '.py'))} "
               f"--call {shlex.quote(function)} --kwargs-stdin")
    return command, sized(source).decode() + json.dumps(dict(kwargs))


class Stream(ABC):
    """A long-lived command on a host whose stdin stays open (the guard's tether)."""

    @abstractmethod
    def readline(self, timeout: float) -> str:
        """The next line it printed; "" when it ended or `timeout` passed first."""

    @abstractmethod
    def write(self, text: str) -> bool:
        """Send `text` to its stdin; False when it is gone."""

    @property
    @abstractmethod
    def ended(self) -> bool:
        """True once the command, or the connection it runs on, is gone."""

    @abstractmethod
    def close(self) -> None:
        """Close its stdin and the channel; the command sees EOF."""


class Transport(ABC):
    """A connection to one host. Opened once, reused by every step of that host."""

    name: str

    @abstractmethod
    def run(
        self, command: str, timeout: float | None = None, stdin: str | None = None
    ) -> RunResult:
        """Run a shell command on the host; never raises for a non-zero exit."""

    def run_script(self, source: str, args: Sequence[str], timeout: float | None = None,
                   before: str = "") -> RunResult:
        """Run a host script as `python3 - ARGS` with `source` on its stdin; `before`: a
        shell command run first (the script runs only when it exits 0). Transports that keep
        a warm interpreter on the host run it there."""
        return self.run(script_command(args, before), timeout=timeout, stdin=source)

    def call(self, source: str, call: str, kwargs: Mapping[str, JSON],
             timeout: float | None = None) -> RunResult:
        """Call one function of a host module (`call`: "ops.stop"; `source`: the module's
        text, which runs it by its call() dispatcher) with keyword arguments: its report is
        the result's stdout, one JSON line. Without an agent the module runs as
        `python3 -c BOOTSTRAP --call NAME --kwargs-stdin`, the module and then the kwargs
        on its stdin (never in the command line)."""
        command, feed = call_command(source, call, kwargs)
        return self.run(command, timeout=timeout, stdin=feed)

    def call_beside(self, source: str, call: str, kwargs: Mapping[str, JSON],
                    timeout: float | None = None, wait: float = 0.0) -> RunResult:
        """call(), waiting at most `wait` seconds behind a command under way on this
        connection (a lock's heartbeat while the host's step waits on its proof): past
        that, it runs on a channel of its own. Transports that run one command at a time
        override it."""
        return self.call(source, call, kwargs, timeout)

    @abstractmethod
    def put(self, local_path: LocalFile, remote_path: str, resume: bool = False,
            progress: Progress | None = None) -> None:
        """Copy a local file to the host. `resume`: append to what a partial copy left.
        `progress`: told the bytes of the file on the host so far, as they go."""

    def put_and_digest(self, local_path: LocalFile, remote_path: str, mode: int = 0o644,
                       progress: Progress | None = None) -> str:
        """Copy a local file to the host, creating its folder and setting its mode, and return
        the sha256 the host computed of the bytes it wrote there. Raises CommandFailed when the
        host could not write them. Transports that can do it all in one round trip do.
        `progress`: called with the bytes sent so far, as they go (here: once, at the end)."""
        path = shlex.quote(remote_path)
        folder = shlex.quote(remote_path.rsplit("/", 1)[0] or "/")
        self.run(f"mkdir -p -- {folder}").check()
        self.put(local_path, remote_path)
        if progress is not None:
            progress(local_size(local_path))
        self.run(f"chmod {mode:o} -- {path}").check()
        return self.run(f"sha256sum -- {path}").check().stdout.split(" ", 1)[0]

    @abstractmethod
    def get(self, remote_path: str, local_path: str) -> None:
        """Copy a file from the host."""

    def open_stream(self, command: str, stdin: bytes) -> Stream | None:
        """Start `command` on a channel of its own, send `stdin` and keep its stdin open.
        None: this transport keeps no such channel (a host without a guard)."""
        return None

    def keeps_sources(self) -> bool:
        """True when a script or module sent once stays on the host for this connection's
        later commands (a host agent: each source goes once, then only its sha256)."""
        return False

    def close(self) -> None:  # noqa: B027 - optional hook
        """Release the connection."""
