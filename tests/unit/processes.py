"""Processes on this machine, read from /proc, for the unit tests that stop one."""

from __future__ import annotations

import time
from pathlib import Path


def alive(pid: int) -> bool:
    """Whether `pid` runs (a zombie or a dead process does not)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state not in ("Z", "X")


def assert_ends(pid: int, what: str, within: float = 10) -> None:
    """Wait until `pid` no longer runs (it was signalled: the kernel finishes it), polling
    every 50 ms; fails with `pid {pid} {what}` after `within` s."""
    end = time.monotonic() + within
    while alive(pid):
        assert time.monotonic() < end, f"pid {pid} {what}"
        time.sleep(0.05)
