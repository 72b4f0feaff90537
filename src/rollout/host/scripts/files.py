"""Files the controller writes on a host, written without following a link; and the check,
before root acts there, that nothing under the root is a planted link or open to others.

Run on the host by the controller:

    python3 -c BOOTSTRAP write PATH [--keep KEPT] [--if-changed]   (the text on stdin)
    python3 - copy SRC DST < files.py
    python3 - check --root /data [--path P ...] < files.py

`write` replaces PATH whole with stdin (0600); `--keep`: the file it replaces is kept there
first; `--if-changed`: nothing is written when PATH already holds the text. `copy` puts a
kept file back. `check` lists every problem found: a root, rollout/ or releases/ folder not
owned by root or writable by group or others; a supervisor.py likewise; any symbolic link
under rollout/ or in releases/; a PATH (or its folder) that is a link; a `current` that does
not point into releases/. Prints one JSON object: {"ok": true, ...} or {"ok": false,
"refused": REASON} / {"problems": [...]}. Standard library only; runs on python3 >= 3.9.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import stat
import sys
from typing import Any

# ruff: noqa: E501
# isort: off
from rollout.host.scripts.common import UnsafePath, ownership_problem, safe_open, safe_write  # inlined on hosts
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


def parse_args(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(description="files written without following a link")
    sub = p.add_subparsers(dest="action", required=True)
    w = sub.add_parser("write", help="replace PATH with stdin")
    w.add_argument("path")
    w.add_argument("--keep", help="keep the file replaced here first")
    w.add_argument("--if-changed", action="store_true")
    c = sub.add_parser("copy", help="put SRC's bytes in DST")
    c.add_argument("src")
    c.add_argument("dst")
    k = sub.add_parser("check", help="what root must not act on under --root")
    k.add_argument("--root", default="/data")
    k.add_argument("--path", action="append", default=[], help="also a file rollout writes")
    return p.parse_args(argv)


def main(argv: list[str]) -> int:
    args = parse_args(argv)
    try:
        if args.action == "write":
            out = write(args.path, sys.stdin.buffer.read(), args.keep, args.if_changed)
        elif args.action == "copy":
            out = copy(args.src, args.dst)
        else:
            problems = check(args.root, args.path)
            out = {"ok": not problems, "problems": problems}
    except UnsafePath as e:
        out = {"ok": False, "refused": str(e)}
    except OSError as e:
        out = {"ok": False, "refused": f"{e.filename or ''}: {e.strerror}"}
    print(json.dumps(out, sort_keys=True))
    return 0 if out["ok"] else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
