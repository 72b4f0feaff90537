"""The one way the controller reads a file: a regular file only, bounded, never blocking.

Every file rollout reads on the controller (inventories, group_vars and host_vars, ssh_config,
keys, known_hosts, `--set @FILE`, playbooks, templates, bundles' manifests, journals) comes
through here. A FIFO, a device (/dev/zero), a folder or a socket is refused without reading
a byte; a file over its cap is refused, checked while reading (a file that grows is cut).
`inside`: the file, links followed, must resolve within that folder (a group_vars entry that
is a link to /etc/shadow is refused). Errors name the path and never quote its contents.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO

from rollout.errors import ConfigError, Location

DEFAULT_LIMIT = 16 * 1024 * 1024
"""16 MiB: larger than any inventory, playbook, key or manifest rollout expects."""

_KINDS = (
    (stat.S_ISDIR, "a folder"),
    (stat.S_ISFIFO, "a FIFO"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISSOCK, "a socket"),
)
_CHUNK = 1 << 20


class UnreadableFile(ConfigError):
    """A file rollout was told to read and cannot or will not: exit 2, naming the path.
    The message is `{what} {why}`: "inventory file not found", "key_file is a FIFO, ..."."""

    def __init__(self, path: Path, what: str, why: str) -> None:
        super().__init__(f"{what} {why}", Location(str(path)))
        self.path = path
        self.why = why


def _kind(mode: int) -> str:
    return next((name for test, name in _KINDS if test(mode)), "not a regular file")


def _check_inside(path: Path, folder: Path, what: str) -> None:
    target = path.resolve()
    if not target.is_relative_to(folder.resolve()):
        raise UnreadableFile(path, what, f"is a link that leads out of {folder} (to {target})")


def open_regular(path: Path | str, what: str, *, inside: Path | None = None) -> BinaryIO:
    """`path` open for reading in binary, once it is known to be a regular file (opened
    without blocking: a FIFO is refused, never waited on). UnreadableFile otherwise."""
    file = Path(path)
    if inside is not None:
        _check_inside(file, inside, what)
    try:
        fd = os.open(file, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC)
    except FileNotFoundError:
        raise UnreadableFile(file, what, "not found") from None
    except OSError as e:
        raise UnreadableFile(file, what, f"cannot be opened: {e.strerror}") from None
    mode = os.fstat(fd).st_mode
    if not stat.S_ISREG(mode):
        os.close(fd)
        raise UnreadableFile(file, what, f"is {_kind(mode)}, not a regular file")
    os.set_blocking(fd, True)
    return os.fdopen(fd, "rb")


def read_bytes(path: Path | str, what: str, *, limit: int = DEFAULT_LIMIT,
               inside: Path | None = None) -> bytes:
    """The bytes of `path`, a regular file of at most `limit` bytes. UnreadableFile
    otherwise (missing, not a regular file, too large, a link out of `inside`)."""
    with open_regular(path, what, inside=inside) as f:
        try:
            data = _read_at_most(f, limit + 1)
        except OSError as e:
            raise UnreadableFile(Path(path), what, f"cannot be read: {e.strerror}") from None
    if len(data) > limit:
        raise UnreadableFile(Path(path), what, f"is larger than its {limit:,}-byte cap")
    return data


def _read_at_most(f: BinaryIO, size: int) -> bytes:
    """Up to `size` bytes, read a chunk at a time: `f.read(size)` would allocate all of
    `size` for a file of a few bytes."""
    parts: list[bytes] = []
    got = 0
    while got < size and (part := f.read(min(_CHUNK, size - got))):
        parts.append(part)
        got += len(part)
    return b"".join(parts)


def read_text(path: Path | str, what: str, *, limit: int = DEFAULT_LIMIT,
              inside: Path | None = None) -> str:
    """`read_bytes` as UTF-8 text; bytes that are not UTF-8 are refused by offset, never
    shown."""
    data = read_bytes(path, what, limit=limit, inside=inside)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise UnreadableFile(Path(path), what, f"is not UTF-8 text (at byte {e.start})") from None


def read_lines(path: Path | str, what: str, *, max_line: int,
               limit: int) -> Iterator[tuple[int, bytes | None]]:
    """(line number, the line with its newline) for each line of `path`, a regular file of
    at most `limit` bytes (UnreadableFile past it); a line longer than `max_line` bytes is
    given as None, never held whole in memory."""
    with open_regular(path, what) as f:
        total, number = 0, 0
        while line := f.readline(max_line + 1):
            number += 1
            total += len(line)
            long = len(line) > max_line
            if long and not line.endswith(b"\n"):
                total += _skip_rest(f, limit - total)
            if total > limit:
                raise UnreadableFile(Path(path), what, f"is larger than its {limit:,}-byte cap")
            yield number, None if long else line


def _skip_rest(f: BinaryIO, budget: int) -> int:
    """Read past the rest of the current line in chunks, or past `budget` bytes; how many
    bytes that was."""
    skipped = 0
    while skipped <= budget and (chunk := f.readline(_CHUNK)):
        skipped += len(chunk)
        if chunk.endswith(b"\n"):
            break
    return skipped
