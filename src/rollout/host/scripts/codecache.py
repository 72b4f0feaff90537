"""rollout's code cache on a host: a script compiled once per host, not once per start.

The agent inlines it (a request names its script by sha256; "unknown" asks for the source),
and bootstrap() puts it in the `python3 -c` code that starts every host script sent on stdin
(the agent, the guard, a download, a call without an agent), so that each compiles the script
only where the cache has no code for it (the guard's 78 KB: about 30 ms of a loaded host).

The cache is $XDG_CACHE_HOME, else ~/.cache, then rollout/code/SHA256.TAG.sealed (SHA256:
the source's; TAG: this python3's, whose bytecode it is). A file starts with a seal (the sha256
of its name's sha256 and of the marshalled code), then that code. It is used only as a
directory of this user's own that no one else may write; a file is opened without following
links, must be this user's own regular file, and is ignored (compiled again and replaced)
where its seal does not match. The seal (unkeyed) guards integrity only: it catches a torn or
partial write and a file copied under another name, not a writer; anything running as this
user can write code with a valid seal. Trust rests on the folder and its files being this
user's alone (the owner, mode and no-link checks).
Standard library only; python3 >= 3.9.
"""

from __future__ import annotations

import contextlib
import hashlib
import marshal
import os
import re
import stat
import sys
import types

SHA256 = re.compile(r"[0-9a-f]{64}")
CACHE_CAP = 16 << 20  # bytes of one cached code file: past it, compiled again
CACHE_KEEP = 64  # code files kept (about 11 per release of rollout): the oldest go first


def cache_dir() -> str | None:
    """The code cache (made 0700 if missing); None unless it is a directory of this user,
    that no one else may write (a link to one is followed, as for any folder)."""
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    path = os.path.join(base, "rollout", "code")
    try:
        os.makedirs(path, mode=0o700, exist_ok=True)
        st = os.stat(path)
    except OSError:
        return None
    mine = stat.S_ISDIR(st.st_mode) and st.st_uid == os.geteuid()
    return path if mine and not st.st_mode & 0o022 else None


def _cache_path(sha: str) -> str | None:
    folder = cache_dir() if SHA256.fullmatch(sha) else None
    tag = f"{sys.implementation.cache_tag}-{sys.hexversion:x}"
    return None if folder is None else os.path.join(folder, f"{sha}.{tag}.sealed")


def _seal(sha: str, data: bytes) -> bytes:
    """The digest a code file starts with: of the sha256 in its name and of its code."""
    return hashlib.sha256(sha.encode() + data).digest()


def load_code(sha: str) -> types.CodeType | None:
    """The cached code of the script `sha`, or None (not cached, not a file of this user,
    or its digest does not match)."""
    path = _cache_path(sha)
    if path is None:
        return None
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    except OSError:
        return None
    with os.fdopen(fd, "rb") as f:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_uid != os.geteuid() or st.st_size > CACHE_CAP:
            return None
        data = f.read(CACHE_CAP + 1)
    if data[:32] != _seal(sha, data[32:]):
        return None
    try:
        code = marshal.loads(data[32:])
    except (ValueError, EOFError, TypeError):
        return None
    return code if isinstance(code, types.CodeType) else None


def store_code(sha: str, code: types.CodeType) -> None:
    """Keep `code` in the cache (0600, written aside, then renamed: never half a file); a
    cache that cannot be written is no cache."""
    path = _cache_path(sha)
    if path is None:
        return
    aside = f"{path}.{os.getpid()}.new"
    data = marshal.dumps(code)
    try:
        fd = os.open(aside, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
        with os.fdopen(fd, "wb") as f:
            f.write(_seal(sha, data) + data)
        os.replace(aside, path)
    except OSError:
        with contextlib.suppress(OSError):
            os.unlink(aside)
        return
    prune_cache(os.path.dirname(path))


def prune_cache(folder: str, keep: int = CACHE_KEEP) -> None:
    """Remove the oldest code files past `keep` (files only, never through a link)."""
    try:
        names = [n for n in os.listdir(folder) if SHA256.fullmatch(n.split(".")[0])]
        if len(names) <= keep:
            return
        ages = {n: os.lstat(os.path.join(folder, n)).st_mtime for n in names}
    except OSError:
        return
    for name in sorted(ages, key=ages.__getitem__)[: len(names) - keep]:
        with contextlib.suppress(OSError):
            os.unlink(os.path.join(folder, name))


def compiled(source: bytes, filename: str) -> types.CodeType:
    """The code of `source`: from the cache where it holds it, else compiled and kept."""
    sha = hashlib.sha256(source).hexdigest()
    code = load_code(sha)
    if code is None:
        code = compile(source, filename, "exec", dont_inherit=True)
        store_code(sha, code)
    return code


def run_sized(filename: str) -> None:
    """Run the script at the start of stdin (a LENGTH line, then its text) as __main__,
    leaving the rest of stdin to it: what bootstrap() runs."""
    size = int(sys.stdin.buffer.readline())
    exec(compiled(sys.stdin.buffer.read(size), filename), {"__name__": "__main__"})  # noqa: S102 - a rollout host script, from the controller
