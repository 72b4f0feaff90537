"""Locks: one per host (a file under the release root) and one per fleet on the controller.

A second rollout fails fast and names the holder, or waits (`lock_wait`). A stale host
lock (holder gone, older than a limit) is broken only when asked (`break_lock`), and the
break is reported as an event.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import socket
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from rollout.errors import LockHeld
from rollout.layout import q
from rollout.steps.base import HostContext


@dataclass(frozen=True)
class Holder:
    run_id: str
    operator: str
    controller: str
    pid: int
    started: float
    version: str

    def describe(self) -> str:
        age = time.time() - self.started
        return (
            f"run {self.run_id} by {self.operator} on {self.controller} (pid {self.pid}), "
            f"version {self.version or '-'}, started {age:.0f}s ago"
        )

    def gone(self) -> bool:
        """The holder's process is gone. Only knowable when it ran on this controller."""
        if self.controller != socket.gethostname():
            return True
        try:
            os.kill(self.pid, 0)
        except ProcessLookupError:
            return True
        except PermissionError:
            return False
        return False


@dataclass(frozen=True)
class LockPolicy:
    wait: float = 0.0  # seconds to wait for a held lock
    break_stale: bool = False
    stale_after: float = 3600.0  # a lock older than this whose holder is gone is stale


def _parse(text: str) -> Holder | None:
    try:
        return Holder(**json.loads(text))
    except (ValueError, TypeError):
        return None


def _try_host_lock(ctx: HostContext, me: Holder) -> Holder | None:
    """Take the lock (or keep our own); return the other holder when it is held."""
    path = q(ctx.layout.lock)
    mine = q(json.dumps(asdict(me)))
    r = ctx.sh(
        f"mkdir -p -- {q(ctx.layout.state_dir)} && "
        f"if (set -o noclobber; printf %s {mine} > {path}) 2>/dev/null; then echo TAKEN; "
        f"else cat -- {path}; fi"
    ).check()
    if r.stdout.strip() == "TAKEN":
        return None
    holder = _parse(r.stdout.strip())
    if holder is None or holder.run_id == me.run_id:  # unreadable, or ours (a resumed run)
        ctx.sh(f"printf %s {mine} > {path}").check()
        return None
    return holder


def acquire_host_lock(
    ctx: HostContext, me: Holder, policy: LockPolicy, on_break: Callable[[Holder], None]
) -> None:
    deadline = time.monotonic() + policy.wait
    while True:
        holder = _try_host_lock(ctx, me)
        if holder is None:
            return
        stale = holder.gone() and time.time() - holder.started > policy.stale_after
        if stale and policy.break_stale:
            on_break(holder)
            ctx.sh(f"rm -f -- {q(ctx.layout.lock)}").check()
            continue
        if time.monotonic() >= deadline:
            hint = (
                " It looks stale: --break-lock breaks it."
                if stale
                else " Wait for it, or pass --lock-wait SECONDS."
            )
            raise LockHeld(f"{ctx.name} is locked by {holder.describe()}.{hint}")
        time.sleep(min(2.0, max(0.1, deadline - time.monotonic())))


def release_host_lock(ctx: HostContext, me: Holder) -> None:
    path = q(ctx.layout.lock)
    ctx.sh(f"grep -qF -- {q(me.run_id)} {path} 2>/dev/null && rm -f -- {path}")


@contextlib.contextmanager
def fleet_lock(runs_dir: Path, inventory: Path, me: Holder, wait: float) -> Iterator[None]:
    """One rollout per inventory on this controller (flock: freed if the process dies)."""
    key = hashlib.sha256(str(inventory.resolve()).encode()).hexdigest()[:12]
    runs_dir.mkdir(parents=True, exist_ok=True)
    path = runs_dir / f"fleet-{key}.lock"
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        _flock(fd, path, wait)
        os.ftruncate(fd, 0)
        os.write(fd, json.dumps(asdict(me)).encode())
        yield
    finally:
        os.close(fd)


def _flock(fd: int, path: Path, wait: float) -> None:
    deadline = time.monotonic() + wait
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return
        except BlockingIOError:
            if time.monotonic() >= deadline:
                holder = _parse(path.read_text())
                who = holder.describe() if holder else "another rollout"
                raise LockHeld(
                    f"the fleet is locked by {who} ({path}). "
                    "Wait for it, or pass --lock-wait SECONDS."
                ) from None
            time.sleep(0.5)


def holder_for(run_id: str, operator: str, controller: str, version: str) -> Holder:
    return Holder(run_id, operator, controller, os.getpid(), time.time(), version)


def as_dict(holder: Holder) -> dict[str, Any]:
    return asdict(holder)
