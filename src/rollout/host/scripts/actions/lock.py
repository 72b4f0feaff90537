"""The host's deploy lock, <root>/rollout/lock (lock.py's docstring says how it is kept):
the `lock` action takes, refreshes, releases or breaks it, and reads this machine's id in
the same round trip. Standard library only; python3 >= 3.9."""

from __future__ import annotations

import contextlib
import errno
import fcntl
import hashlib
import json
import os
import re
import stat
import time
from collections.abc import Iterator
from typing import Any

# ruff: noqa: E501
# isort: off
from rollout.host.scripts.common import UnsafePath, safe_mkdir, safe_open  # inlined on hosts
from rollout.host.scripts.actions.base import _report  # inlined on hosts
from rollout.host.scripts.actions.spec import action  # inlined on hosts
# isort: on

MAX_TEXT = 2000  # of another holder's lock, reported as found


@contextlib.contextmanager
def guarded(state_dir: str) -> Iterator[None]:
    fd = safe_open(os.path.join(state_dir, "lock.guard"), os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def found(path: str) -> dict[str, Any] | None:
    """The lock as it is: its text, sha256, age and how far its date is ahead of this host's
    clock ("ahead", 0 when not), in seconds; None when there is none.
    Never read through a link; text that is not JSON is never sent back, only its size
    ("problem": not rollout's lock)."""
    try:
        with os.fdopen(safe_open(path, os.O_RDONLY), "rb") as f:
            data = f.read(1 << 20)
            age = time.time() - os.fstat(f.fileno()).st_mtime
    except FileNotFoundError:
        return None
    except UnsafePath as e:  # a link: named, never followed; breakable (its link removed)
        why = f"not rollout's lock: {e}"
        return {"text": "", "sha256": hashlib.sha256(why.encode()).hexdigest(), "age": 0.0,
                "problem": why}
    except OSError as e:  # a directory, unreadable: still a lock someone must look at
        return {"text": f"<unreadable: {e.strerror}>", "sha256": "", "age": 0.0}
    lock = {"text": data[:MAX_TEXT].decode(errors="replace"),
            "sha256": hashlib.sha256(data).hexdigest(), "age": round(max(0.0, age), 3),
            "ahead": round(max(0.0, -age), 3)}
    try:
        json.loads(data)
    except ValueError:
        if data.strip():
            lock.update(text="", problem=f"not rollout's lock ({len(data)} bytes, not JSON)")
    return lock


def is_mine(lock: dict[str, Any], run_id: str) -> bool:
    try:
        doc = json.loads(lock["text"])
    except ValueError:
        return False
    return isinstance(doc, dict) and doc.get("run_id") == run_id


def write_whole(path: str, holder: dict[str, Any], replace: bool) -> bool:
    """Write the lock in one piece; without `replace`, only where there is none."""
    text = json.dumps({**holder, "heartbeat": time.time()}, sort_keys=True)
    tmp = f"{path}.tmp.{os.getpid()}"
    with contextlib.suppress(FileNotFoundError):
        os.unlink(tmp)  # a leftover (or a link) of a dead pid: never written through
    try:
        with os.fdopen(safe_open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL), "w") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        if replace:
            os.replace(tmp, path)
        else:
            os.link(tmp, path)
    except FileExistsError:
        return False
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
    dir_fd = os.open(os.path.dirname(path), os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)
    return True


def act(action: str, path: str, holder: dict[str, Any], expect: str | None) -> dict[str, Any]:
    """One action on the lock; the caller holds the guard."""
    lock = found(path)
    run_id = str(holder.get("run_id"))
    if action == "break" and lock is not None:
        if lock["sha256"] != expect:
            return {"ok": False, "lock": lock, "note": "the lock changed: not broken"}
        os.unlink(path)
        lock, action = None, "take"
    if lock is None:
        if action != "take":
            return {"ok": action == "release", "note": "no lock"}
        if not write_whole(path, holder, replace=False):
            return {"ok": False, "lock": found(path)}
        return {"ok": True, "note": "taken"}
    if not is_mine(lock, run_id):
        return {"ok": False, "lock": lock}
    if action == "release":
        os.unlink(path)
        return {"ok": True, "note": "released"}
    write_whole(path, holder, replace=True)
    return {"ok": True, "note": "kept" if action == "take" else "refreshed"}


def host_id(state_dir: str) -> str:
    """This machine's id: <root>/rollout/host-id, 128 random bits in hex, made at first
    contact (two inventory entries that reach the same /data are one machine; host keys and
    /etc/machine-id are not enough, containers from one image share both). Made whole: a
    temporary file (O_EXCL, no link followed), fsynced, then linked into place, which never
    replaces what is there. ValueError when the file is a link, not a file, or holds no id."""
    path = os.path.join(state_dir, "host-id")
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except FileNotFoundError:
        return _make_host_id(path)
    except OSError as e:  # ELOOP: a link in its place
        raise ValueError(f"{path} cannot be read without following a link: {e.strerror}"
                         ) from e
    with os.fdopen(fd, "rb") as f:
        if not stat.S_ISREG(os.fstat(f.fileno()).st_mode):
            raise ValueError(f"{path} is not a regular file")
        text = f.read(64).strip()
    if not re.fullmatch(rb"[0-9a-f]{32}", text):
        raise ValueError(f"{path} holds no host id ({len(text)} bytes): remove it, and the "
                         "next contact makes a new one")
    return text.decode()


def _make_host_id(path: str) -> str:
    import secrets  # here: made once per machine, and every other call of ops would pay

    made = secrets.token_hex(16)
    tmp = f"{path}.new.{os.getpid()}"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644)
    try:
        with os.fdopen(fd, "w") as f:
            f.write(made + "\n")
            f.flush()
            os.fsync(f.fileno())
        os.link(tmp, path, follow_symlinks=False)
    except FileExistsError:  # made meanwhile (by a run without the guard): read it
        return host_id(os.path.dirname(path))
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
    return made


def identify(state_dir: str) -> dict[str, Any]:
    """{"host_id": ID}, or {"host_id_error": why} when it cannot be read or made."""
    try:
        return {"host_id": host_id(state_dir)}
    except (OSError, ValueError) as e:
        return {"host_id_error": str(e)[:300]}


DENIED = (errno.EACCES, errno.EPERM)


@action("root:str do:str holder:obj expect:str?",
        "ok:bool lock:obj note:str host_id:str host_id_error:str refused:str denied:str",
        "done held refused denied")
def lock(root: str, do: str, holder: dict[str, Any], expect: str | None = None
         ) -> dict[str, Any]:
    """`do` (take, refresh, release or break) on this host's lock for `holder` (the
    controller's JSON object; break: only while the lock's sha256 is still `expect`):
    "done", or "held" (another holder's lock, as found, under "lock"); "refused" where
    the state folder or its guard is a link or cannot be written, "denied" (the path)
    where this user may not write there. "ok" as lock.py has it."""
    if do not in ("take", "refresh", "release", "break"):
        return _report("refused", f"no lock action {do[:40]!r}", ok=False,
                       refused=f"no lock action {do[:40]!r}")
    state_dir = os.path.join(root, "rollout")
    try:
        safe_mkdir(state_dir)
        with guarded(state_dir):
            out = act(do, os.path.join(state_dir, "lock"), holder, expect)
            out.update(identify(state_dir))
    except UnsafePath as e:  # a link in place of the state folder or the guard: refused
        return _report("refused", str(e), ok=False, refused=str(e))
    except OSError as e:  # a full or read-only /data: said plainly, never a traceback
        why = f"{state_dir}: the deploy lock cannot be written there: {e.strerror or e}"
        if e.errno in DENIED:
            name = str(e.filename or "")  # safe_open names the file by itself (dir_fd)
            path = name if name.startswith("/") else os.path.join(state_dir, name) if name \
                else state_dir
            return _report("denied", why, ok=False, refused=why, denied=path)
        return _report("refused", why, ok=False, refused=why)
    held = not out["ok"]
    return _report("held" if held else "done", str(out.get("note") or
                   ("another holder's lock" if held else do)), **out)
