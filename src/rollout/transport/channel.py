"""Run one command on an SSH session channel, its input sent over the channel's stdin.

File contents (a rendered config, a host-side script) travel as stdin, never in the
command line, where `ps` on the host would show them to every local user.
"""

from __future__ import annotations

import select
import time
from dataclasses import dataclass, field

import paramiko

_CHUNK = 1 << 16


@dataclass
class ChannelOutput:
    exit_code: int = -1
    stdout: bytearray = field(default_factory=bytearray)
    stderr: bytearray = field(default_factory=bytearray)
    timed_out: bool = False

    def text(self) -> tuple[str, str]:
        return (
            self.stdout.decode("utf-8", errors="replace"),
            self.stderr.decode("utf-8", errors="replace"),
        )


def _send(channel: paramiko.Channel, data: bytes | None) -> None:
    """Send stdin, then EOF. A command that exits without reading it is not an error."""
    try:
        if data:
            channel.sendall(data)
        channel.shutdown_write()
    except OSError:
        pass  # the far end closed its stdin; the exit status says what happened


def _drain(channel: paramiko.Channel, out: ChannelOutput) -> bool:
    """Read what has arrived; True once the command has exited and said everything."""
    got = False
    while channel.recv_ready():
        out.stdout += channel.recv(_CHUNK)
        got = True
    while channel.recv_stderr_ready():
        out.stderr += channel.recv_stderr(_CHUNK)
        got = True
    said_all = bool(channel.eof_received or channel.closed)
    return not got and channel.exit_status_ready() and said_all


def run_on_channel(
    transport: paramiko.Transport, command: str, stdin: bytes | None, timeout: float | None
) -> ChannelOutput:
    """Run `command`, feed it `stdin`, collect its output until it exits or `timeout`."""
    out = ChannelOutput()
    deadline = None if timeout is None else time.monotonic() + timeout
    channel = transport.open_session()
    try:
        channel.settimeout(timeout)
        channel.exec_command(command)
        _send(channel, stdin)
        while not _drain(channel, out):
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                out.timed_out = True
                return out
            select.select([channel], [], [], min(left or 1.0, 1.0))
        out.exit_code = channel.recv_exit_status()
        return out
    finally:
        channel.close()
