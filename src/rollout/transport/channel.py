"""Run one command on an SSH session channel, its input sent over the channel's stdin.

File contents (a rendered config, a host-side script) travel as stdin, never in the
command line, where `ps` on the host would show them to every local user. A file upload
is a command too (`cat > FILE`), its bytes streamed into the channel: one round trip,
and per byte only the SSH packet's own cost (SFTP splits each write into two packets and
answers each one).
"""

from __future__ import annotations

import contextlib
import select
import time
from collections.abc import Iterable
from dataclasses import dataclass, field

import paramiko

from rollout.errors import HostAnswerError
from rollout.transport.base import Stream

_CHUNK = 1 << 16
_STDERR_KEPT = 1 << 16  # bytes of a stream's stderr kept: a host may print without end
OUTPUT_CAP = 16 << 20  # bytes of a command's stdout or stderr, refused past it while reading
LINE_CAP = 16 << 20  # bytes of one line on a stream (an agent's answer), refused past it


@dataclass
class ChannelOutput:
    exit_code: int = -1
    stdout: bytearray = field(default_factory=bytearray)
    stderr: bytearray = field(default_factory=bytearray)
    timed_out: bool = False
    oversized: str | None = None  # "stdout" or "stderr": it went past OUTPUT_CAP, cut there

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
        if len(out.stdout) > OUTPUT_CAP:
            out.oversized = "stdout"
            return True
    while channel.recv_stderr_ready():
        out.stderr += channel.recv_stderr(_CHUNK)
        got = True
        if len(out.stderr) > OUTPUT_CAP:
            out.oversized = "stderr"
            return True
    said_all = bool(channel.eof_received or channel.closed)
    return not got and channel.exit_status_ready() and said_all


def _wait(channel: paramiko.Channel, seconds: float) -> None:
    """Until more output, the exit status or `seconds`. After the command's EOF the channel
    reads as ready for good (paramiko sets its pipe forever): a select would return at once,
    and the loop would spin until the exit status came. Then the status is waited for."""
    if channel.eof_received:
        channel.status_event.wait(seconds)
    else:
        select.select([channel], [], [], seconds)


def _collect(channel: paramiko.Channel, out: ChannelOutput, deadline: float | None) -> None:
    """Read the command's output until it exits, or mark it timed out at `deadline`, or
    oversized (then the channel is left unread: its closing ends the command)."""
    while not _drain(channel, out):
        left = None if deadline is None else deadline - time.monotonic()
        if left is not None and left <= 0:
            out.timed_out = True
            return
        _wait(channel, min(left or 1.0, 1.0))
    if out.oversized:
        del out.stdout[OUTPUT_CAP:], out.stderr[OUTPUT_CAP:]
        return
    out.exit_code = channel.recv_exit_status()


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
        _collect(channel, out, deadline)
        return out
    finally:
        channel.close()


def _stream(channel: paramiko.Channel, chunks: Iterable[bytes]) -> None:
    """Send every chunk, one SSH packet's worth at a time: sendall on a large buffer re-slices
    (copies) the rest of it after each packet."""
    step = max(1024, channel.out_max_packet_size - 64)
    for chunk in chunks:
        for start in range(0, len(chunk), step):
            channel.sendall(chunk[start : start + step])


def stream_to_channel(
    transport: paramiko.Transport, command: str, chunks: Iterable[bytes], stall: float
) -> ChannelOutput:
    """Run `command` with `chunks` as its stdin, then collect its output until it exits.
    A send that makes no progress for `stall` seconds raises TimeoutError. A command that
    exits before reading everything (a full disk, a missing folder) is not a send error: its
    exit status and output say what happened. A dead connection raises."""
    out = ChannelOutput()
    channel = transport.open_session()
    try:
        channel.settimeout(stall)
        channel.exec_command(command)
        try:
            _stream(channel, chunks)
            channel.shutdown_write()
        except TimeoutError:
            raise
        except OSError:
            if not (channel.closed and transport.is_active()):
                raise  # the connection, not the command, went away
        _collect(channel, out, time.monotonic() + stall)
        return out
    finally:
        channel.close()


class ChannelStream(Stream):
    """A command on a session channel of its own whose stdin stays open."""

    def __init__(self, channel: paramiko.Channel) -> None:
        self.channel = channel
        self._buf = bytearray()
        self.stderr = bytearray()

    @classmethod
    def open(cls, transport: paramiko.Transport, command: str, stdin: bytes) -> ChannelStream:
        channel = transport.open_session()
        channel.exec_command(command)
        channel.sendall(stdin)
        return cls(channel)

    def readline(self, timeout: float) -> str:
        """The next line; HostAnswerError when more than LINE_CAP bytes came without one
        (what came is dropped: the stream is then out of step, the caller drops it)."""
        deadline = time.monotonic() + timeout
        while b"\n" not in self._buf:
            if len(self._buf) > LINE_CAP:
                self._buf = bytearray()
                raise HostAnswerError(f"a line of over {LINE_CAP >> 20} MiB from the host: "
                                      "refused")
            if self.channel.recv_stderr_ready():  # kept for a message: its tail only
                self.stderr = (self.stderr + self.channel.recv_stderr(_CHUNK))[-_STDERR_KEPT:]
            if self.channel.recv_ready():
                self._buf += self.channel.recv(_CHUNK)
                continue
            left = deadline - time.monotonic()
            if self.channel.eof_received or self.channel.closed or left <= 0:
                break
            select.select([self.channel], [], [], min(left, 1.0))
        line, newline, rest = bytes(self._buf).partition(b"\n")
        if not newline:
            return ""
        self._buf = bytearray(rest)
        return line.decode("utf-8", errors="replace")

    def write(self, text: str) -> bool:
        try:
            self.channel.sendall(text.encode())
            return True
        except (OSError, EOFError, paramiko.SSHException):
            return False

    @property
    def ended(self) -> bool:
        transport = self.channel.get_transport()
        alive = transport is not None and transport.is_active()
        return not alive or self.channel.closed or self.channel.exit_status_ready()

    def close(self) -> None:
        with contextlib.suppress(OSError, EOFError, paramiko.SSHException):
            self.channel.shutdown_write()
        self.channel.close()
