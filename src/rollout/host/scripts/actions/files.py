"""Files the controller writes on a host, written without following a link, and the check
before root acts under its root (files.py's docstring says what it refuses): the actions
write_file, copy_file and check_root. Standard library only; python3 >= 3.9."""

from __future__ import annotations

import hashlib
import os
import re
import stat
from typing import Any

# ruff: noqa: E501
# isort: off
from rollout.host.scripts.common import UnsafePath, ownership_problem, safe_open, safe_write  # inlined on hosts
from rollout.host.scripts.actions.base import _report  # inlined on hosts
from rollout.host.scripts.actions.spec import action  # inlined on hosts
# isort: on

MAX_ENTRIES = 20000  # entries of rollout/ looked at for links: bounded
RELEASE_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")


def private(path: str) -> None:
    """Make the regular file `path` 0600, through its own fd: never a link's target."""
    fd = safe_open(path, os.O_RDONLY)
    try:
        os.fchmod(fd, 0o600)
    finally:
        os.close(fd)


def read_nofollow(path: str) -> bytes | None:
    """The bytes of the regular file `path`, never through a link; None when missing."""
    try:
        fd = safe_open(path, os.O_RDONLY)
    except FileNotFoundError:
        return None
    with os.fdopen(fd, "rb") as f:
        return f.read()


def write(path: str, data: bytes, keep: str | None, if_changed: bool) -> dict[str, Any]:
    have = read_nofollow(path)
    if if_changed and have is not None and \
            hashlib.sha256(have).digest() == hashlib.sha256(data).digest():
        private(path)  # unchanged, but still 0600: a rendered config may hold secrets
        return {"ok": True, "changed": False}
    if keep and have is not None:
        safe_write(keep, have)
    safe_write(path, data)
    return {"ok": True, "changed": True}


def copy(src: str, dst: str) -> dict[str, Any]:
    data = read_nofollow(src)
    if data is None:
        return {"ok": True, "changed": False, "note": f"no {src}"}
    safe_write(dst, data)
    return {"ok": True, "changed": True}


def links_under(folder: str, limit: int = MAX_ENTRIES) -> list[str]:
    """Every symbolic link under `folder` (not followed), bounded."""
    found: list[str] = []
    seen = 0
    for base, dirs, files in os.walk(folder, followlinks=False):
        for name in dirs + files:
            seen += 1
            path = os.path.join(base, name)
            if os.path.islink(path):
                found.append(path)
        if seen > limit:
            break
    return found


def current_problem(root: str) -> str | None:
    """Why <root>/current is not a link into <root>/releases; None when it is, or is none."""
    path = os.path.join(root, "current")
    if not os.path.lexists(path):
        return None
    if not os.path.islink(path):
        return f"{path} is not a symbolic link into releases/"
    target = os.readlink(path)
    releases = os.path.realpath(os.path.join(root, "releases"))
    real = os.path.realpath(path)
    name = os.path.basename(target.rstrip("/"))
    if os.path.dirname(real) != releases or not RELEASE_NAME.match(name) or ".." in name:
        return f"{path} points outside {root}/releases (to {target[:200]!r}): refused"
    return None


def check(root: str, paths: list[str]) -> list[str]:
    """Every reason root must not act under `root` (see the module docstring)."""
    state = os.path.join(root, "rollout")
    releases = os.path.join(root, "releases")
    problems = [ownership_problem(root, "rollout's root", follow=True),
                ownership_problem(state, "rollout's state folder"),
                ownership_problem(releases, "the releases folder"),
                ownership_problem(os.path.join(state, "supervisor.py"), "the supervisor")]
    if os.path.isdir(state) and not os.path.islink(state):
        problems += [f"{p} is a symbolic link (to {os.readlink(p)[:200]!r}): rollout never "
                     "writes through a link" for p in links_under(state)]
    if os.path.isdir(releases) and not os.path.islink(releases):
        problems += [f"{e.path} is a symbolic link (to {os.readlink(e.path)[:200]!r}): rollout "
                     "never writes through a link, and a release is a folder"
                     for e in os.scandir(releases) if e.is_symlink()]
    problems.append(current_problem(root))
    for path in paths:
        for p in (os.path.dirname(path), path):
            if os.path.islink(p):
                problems.append(f"{p} is a symbolic link (to {os.readlink(p)[:200]!r}): "
                                "rollout never writes through a link")
        if os.path.lexists(path) and not os.path.islink(path) and \
                not stat.S_ISREG(os.lstat(path).st_mode):
            problems.append(f"{path} is not a regular file")
    return [p for p in dict.fromkeys(problems) if p]


def _refusal(e: OSError) -> dict[str, Any]:
    """A link refused, or an OS error, as the files actions report it."""
    why = str(e) if isinstance(e, UnsafePath) else f"{e.filename or ''}: {e.strerror}"
    return _report("refused", why, ok=False, refused=why)


@action("path:str text:str keep:str? if_changed:bool", "ok:bool changed:bool refused:str",
        "written unchanged refused")
def write_file(path: str, text: str, keep: str | None = None, if_changed: bool = False
               ) -> dict[str, Any]:
    """Replace `path` whole with `text` (0600, never through a link); `keep`: the file it
    replaces is kept there first; `if_changed`: nothing is written when it holds `text`."""
    try:
        out = write(path, text.encode(), keep, if_changed)
    except OSError as e:
        return _refusal(e)
    return _report("written" if out["changed"] else "unchanged", path, **out)


@action("src:str dst:str", "ok:bool changed:bool note:str refused:str", "copied none refused")
def copy_file(src: str, dst: str) -> dict[str, Any]:
    """Put a kept file back: `src`'s bytes in `dst` ("none" where there is no `src`)."""
    try:
        out = copy(src, dst)
    except OSError as e:
        return _refusal(e)
    return _report("copied" if out["changed"] else "none", out.get("note") or dst, **out)


@action("root:str paths:[str]?", "ok:bool problems:[str] refused:str", "clean problems refused")
def check_root(root: str, paths: list[str] | None = None) -> dict[str, Any]:
    """Every reason root must not act under `root` (and on `paths`, files it writes)."""
    try:
        problems = check(root, paths or [])
    except OSError as e:
        return _refusal(e)
    return _report("problems" if problems else "clean", "; ".join(problems)[:2000] or root,
                   ok=not problems, problems=problems)
