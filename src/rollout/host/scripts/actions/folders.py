"""Folders and files: made, removed, identified and hashed (names are plain file names,
hostile: never a path)."""

from __future__ import annotations

import os
import stat
from typing import Any

# ruff: noqa: E501
# isort: off
from rollout.host.scripts.common import safe_mkdir, safe_remove  # inlined on hosts
from rollout.host.scripts.actions.base import _open_read, _report  # inlined on hosts
from rollout.host.scripts.actions.spec import action  # inlined on hosts
# isort: on

def _remove_tree(where: str) -> None:
    """Remove a folder (a link there: the link itself, never its target)."""
    import shutil

    if os.path.islink(where) or not os.path.isdir(where):
        safe_remove(where)
    else:
        shutil.rmtree(where)



@action("path:str link_ok:bool", "", "kept refused made")
def make_folder(path: str, link_ok: bool = False) -> dict[str, Any]:
    """Make the folder `path` and its missing parents (a link in its place is refused;
    link_ok: a link to a folder is that folder, as fetch.py takes param_cache on a disk of
    its own)."""
    if os.path.isdir(path) and (link_ok or not os.path.islink(path)):
        return _report("kept", f"{path} already there")
    try:
        safe_mkdir(path)
    except OSError as e:
        return _report("refused", f"{path}: {e}")
    return _report("made", f"made {path}")


@action("config_path:str param_cache:str", "", "refused made kept")
def config_folders(config_path: str, param_cache: str) -> dict[str, Any]:
    """The config step's folders: the config's (a link there refused) and param_cache (a
    link to a folder taken as it, as make_folder's link_ok), each made where missing; and
    the config's kept copies (<name>.for-*: regular files, never through a link) private."""
    folder, name = os.path.split(config_path.rstrip("/"))
    made = [make_folder(folder or "."), make_folder(param_cache, link_ok=True)]
    refused = [m["reason"] for m in made if m["outcome"] == "refused"]
    if refused:
        return _report("refused", "; ".join(refused)[:400])
    private = 0
    with os.scandir(folder or ".") as entries:
        for entry in entries:
            if entry.name.startswith(f"{name}.for-") and entry.is_file(follow_symlinks=False):
                os.chmod(entry.path, 0o600, follow_symlinks=False)
                private += 1
    word = "made" if any(m["outcome"] == "made" for m in made) else "kept"
    return _report(word, f"{folder} and {param_cache} there; {private} kept config(s) private")


@action("paths:[str]", "removed:[str]", "failed removed none")
def remove_files(paths: list[str]) -> dict[str, Any]:
    """Remove each file (a link: the link itself, never its target); a missing one is
    fine, a folder is refused ("failed", named)."""
    removed, failed = [], []
    for path in [p for p in paths if isinstance(p, str)][:MAX_NAMES]:
        try:
            if safe_remove(path):
                removed.append(path)
        except OSError as e:
            failed.append(f"{path}: {e.strerror or e}")
    if failed:
        return _report("failed", f"could not remove {'; '.join(failed)[:300]}", removed=removed)
    return _report("removed" if removed else "none", f"removed {len(removed)} file(s)",
                   removed=removed)



# ---------------------------------------------------------------- a release's files
# The upload, the pull and staging ahead put a release's executables in a folder of their
# own, then install it under the release's name; the switch and a release read back check
# them. An executable is named by a plain file name (hostile: never a path).

MAX_NAMES = 64  # executables (or files) named in one call


def _names(names: Any) -> list[str]:
    """The plain file names among `names`: no "/", ".", ".." or NUL; at most MAX_NAMES."""
    items = names if isinstance(names, list) else []
    return [n for n in items[:MAX_NAMES] if isinstance(n, str) and n not in ("", ".", "..")
            and "/" not in n and "\0" not in n]


def _identity(path: str) -> str | None:
    """What identifies a regular file without reading it: size, inode, device, and the
    modification and change times in ns (any write, truncate, chmod or replacement moves the
    change time, which no user can set back). None: missing, a link, not a regular file."""
    try:
        st = os.lstat(path)
    except OSError:
        return None
    if not stat.S_ISREG(st.st_mode):
        return None
    return f"{st.st_size} {st.st_ino} {st.st_dev} {st.st_mtime_ns} {st.st_ctime_ns}"


def _evict(path: str) -> None:
    """Write a file back and drop its pages from the page cache (best effort): read twice,
    a release's pages are active file cache charged to the container, which the drain
    would count in the working set."""
    fd = _open_read(path)
    if fd is None:
        return
    try:
        os.fsync(fd)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    except (OSError, AttributeError):
        pass
    finally:
        os.close(fd)


@action("directory:str names:[str] evict:bool", "identities:{str?}", "refused read", in_agent=True)
def identities(directory: str, names: list[str], evict: bool = False) -> dict[str, Any]:
    """Each file's identity (_identity; None for one that is not a regular file there);
    evict: each written back and evicted from the page cache first."""
    if os.path.islink(directory):
        return _report("refused", f"{directory} is a symbolic link", identities={})
    found = {}
    for name in _names(names):
        if evict:
            _evict(os.path.join(directory, name))
        found[name] = _identity(os.path.join(directory, name))
    return _report("read", f"{len(found)} identities read", identities=found)


@action("directory:str names:[str] mode:int?", "sums:{str?}", "read")
def file_sums(directory: str, names: list[str], mode: int | None = None) -> dict[str, Any]:
    """Each file's sha256 (None: missing, a link, not a regular file), made `mode` first
    where given, evicted from the page cache once read."""
    sums: dict[str, str | None] = {}
    for name in _names(names):
        path = os.path.join(directory, name)
        fd = _open_read(path) if mode is not None else None
        if fd is not None:
            try:
                os.fchmod(fd, mode or 0)
            finally:
                os.close(fd)
        sums[name] = _sha256_of(path)
        _evict(path)
    return _report("read", f"{len(sums)} file(s) hashed", sums=sums)


def _sha256_of(path: str) -> str | None:
    """The sha256 of a regular file (never read through a link), None if there is none."""
    import hashlib

    fd = _open_read(path)
    if fd is None:
        return None
    digest = hashlib.sha256()
    with os.fdopen(fd, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()
