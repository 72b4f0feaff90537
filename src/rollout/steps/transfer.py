"""Long transfers a step makes to its host, reported as `progress` events while they run: a
local file put there (resumed where an earlier try stopped), and a download the host makes
itself (curl), watched by the size of the file it writes. What the host prints is hostile
data: only a line of the exact form expected counts; any other is kept, bounded, for the
error message."""

from __future__ import annotations

import os
import re
from collections import deque
from collections.abc import Callable
from typing import TypeVar

from rollout.host.layout import q
from rollout.output.progress import tracker_for
from rollout.readfile import open_regular
from rollout.steps.base import HostContext
from rollout.steps.decision import Call
from rollout.transport.base import Stream

T = TypeVar("T")
READ_WAIT = 5.0  # seconds between two looks at the step's deadline while the host works
WATCH_EVERY = 1.0  # seconds between two sizes of a file the host downloads
_SIZE = re.compile(r"size (\d{1,19})")
_EXIT = re.compile(r"exit (\d{1,3})")


def follow_lines(ctx: HostContext, stream: Stream, on_line: Callable[[str], T | None]) -> T | None:
    """Feed each line the host prints to `on_line` until it returns a result; None when the
    stream ended first. The step's deadline and the guard are checked between lines."""
    last_look = False
    while True:
        ctx.tether()
        left = ctx.remaining()
        line = stream.readline(min(left, READ_WAIT) if left is not None else READ_WAIT)
        result = on_line(line) if line else None
        if result is not None:
            return result
        if not line and stream.ended:
            if last_look:
                return None
            last_look = True


def put_call(remote: str) -> Call:
    """A file put_file copies, as the dry run and the journal name it."""
    return Call("put", {"path": remote})


def put_file(ctx: HostContext, local: str, remote: str, what: str, step: str = "preflight"
             ) -> None:
    """Copy `local` to `remote` on the host, resumed; progress events as the bytes go. The
    file is opened once, as a regular file (a FIFO or a device is refused, never read), and
    sent from that descriptor."""
    call = put_call(remote)
    ctx.record(call.name, call.kwargs)
    with open_regular(local, what) as f:
        tracker = tracker_for(ctx.emit, step, what, os.fstat(f.fileno()).st_size)
        progress = None if tracker is None else tracker.offset(0)
        ctx.transport.put(f, remote, resume=True, progress=progress)


def watched(command: str, path: str, every: float = WATCH_EVERY) -> str:
    """`command` (its output and errors on stdout), with a `size N` line every `every`
    seconds for the file at `path` while it runs, and `exit N` (its status) once it ended."""
    size = f"$(stat -c %s -- {q(path)} 2>/dev/null || echo 0)"
    watcher = f"while sleep {every:g}; do printf 'size %s\\n' \"{size}\"; done"
    return (f"( {watcher} ) & watcher=$!; {{ {command} ; }} 2>&1; code=$?; "
            f'kill $watcher 2>/dev/null; echo "exit $code"')


def run_watched(ctx: HostContext, command: str, path: str, total: int | None, what: str,
                step: str = "preflight", every: float = WATCH_EVERY) -> tuple[int, str]:
    """Run `command` on the host, `path`'s size (looked at every `every` seconds) reported
    as progress towards `total` bytes (none when unknown); (its exit status, the tail of
    what else it printed)."""
    stream = ctx.transport.open_stream(watched(command, path, every), b"")
    if stream is None:
        r = ctx.sh(command)
        return r.exit_code, (r.stderr or r.stdout)[-1000:]
    tracker = tracker_for(ctx.emit, step, what, total) if total else None
    said: deque[str] = deque(maxlen=20)

    def on_line(line: str) -> int | None:
        if (end := _EXIT.fullmatch(line)) is not None:
            return int(end.group(1))
        if (size := _SIZE.fullmatch(line)) is not None:
            if tracker is not None:
                tracker.update(int(size.group(1)))
            return None
        said.append(line[:300])
        return None

    try:
        code = follow_lines(ctx, stream, on_line)
    finally:
        stream.close()
    return (255 if code is None else code), "\n".join(said)
