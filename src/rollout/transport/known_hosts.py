"""The inventory's known_hosts, read line by line as OpenSSH reads it: a line that is not a
host key (garbage, a key that does not decode, bytes that are not UTF-8, a marker paramiko
cannot read) is skipped with a warning naming the file and line, never a crash, and never
the reason every host fails. A `@revoked` line is an error: skipping it would trust a key
the file says must never be trusted."""

from __future__ import annotations

import sys
import threading
from pathlib import Path

import paramiko
from paramiko.hostkeys import HostKeyEntry

from rollout.errors import HostKeyError
from rollout.readfile import UnreadableFile, read_bytes

_warned: set[tuple[str, int]] = set()  # each skipped line is told once per process
_lock = threading.Lock()


def load_known_hosts(keys: paramiko.HostKeys, path: Path) -> list[str]:
    """Add the host keys of `path` to `keys`; the warnings for the lines skipped (each also
    printed once to stderr). HostKeyError for a file that cannot be read or a @revoked line."""
    try:
        data = read_bytes(path, "known_hosts")
    except UnreadableFile as e:
        raise HostKeyError(f"cannot read known_hosts {path}: {e.why}") from e
    warnings = []
    for number, raw in enumerate(data.splitlines(), 1):
        line = raw.decode("utf-8", errors="replace").strip()
        if not line or line.startswith("#"):
            continue
        if line.startswith("@revoked"):
            raise HostKeyError(f"{path}:{number}: @revoked lines are not supported: remove "
                               "the revoked key's own lines instead")
        why = _add(keys, line, number)
        if why:
            warnings.append(f"{path}:{number}: not a host key line ({why}): skipped")
            _tell(path, number, warnings[-1])
    return warnings


def _add(keys: paramiko.HostKeys, line: str, number: int) -> str | None:
    """Add the line's key for each of its host names; why not, when it cannot be read."""
    try:
        entry = HostKeyEntry.from_line(line, number)
    except Exception as e:  # noqa: BLE001 - paramiko raises many types for a bad line
        return f"{type(e).__name__}"
    if entry is None or entry.key is None:
        return "too few fields or an unknown key type"
    for hostname in entry.hostnames:
        keys.add(hostname, entry.key.get_name(), entry.key)
    return None


def _tell(path: Path, number: int, warning: str) -> None:
    with _lock:
        if (str(path), number) in _warned:
            return
        _warned.add((str(path), number))
    print(f"warning: {warning}", file=sys.stderr)
