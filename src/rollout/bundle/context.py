"""The build context as docker sees it: the files `.dockerignore` leaves in, never a cargo
`target/` folder; their content digest (the image's tag), and a stat-only fingerprint that
finds an earlier digest without reading a byte of them (a dry run reads nothing more)."""

from __future__ import annotations

import hashlib
import os
import stat
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

ALWAYS_EXCLUDED = ("**/target",)
"""cargo's build folders (`make cuzk` leaves GiBs in extern/cuzk/target), left out even
without a .dockerignore; a `!path/target` line in .dockerignore takes one back in."""
IGNORE_FILE_LIMIT = 1024**2  # a .dockerignore larger than this is not a list of patterns
CHUNK = 1024**2


def ignore_patterns(context: Path) -> list[str]:
    """ALWAYS_EXCLUDED, then the .dockerignore's patterns as docker reads them (later lines
    win). Only a regular file is read, and only its first MiB: a link to /dev/zero or a FIFO
    there is no list of patterns."""
    patterns = list(ALWAYS_EXCLUDED)
    path = context / ".dockerignore"
    try:
        if not stat.S_ISREG(os.lstat(path).st_mode):
            return patterns
        with open(path, "rb") as f:
            text = f.read(IGNORE_FILE_LIMIT).decode("utf-8", "replace")
    except OSError:
        return patterns
    lines = (line.strip() for line in text.splitlines())
    return patterns + [line for line in lines if line and not line.startswith("#")]


@dataclass(frozen=True)
class Entry:
    """One path the build sends: relative to the context, with its lstat."""

    path: str
    st: os.stat_result

    @property
    def is_file(self) -> bool:
        return stat.S_ISREG(self.st.st_mode)


def included(context: Path, dockerfile: Path) -> list[Entry]:
    """What the build sends, sorted, by docker's own pattern rules (the docker SDK's
    exclude_paths: an excluded folder is not even walked)."""
    from docker.utils.build import exclude_paths

    name = _dockerfile_name(context, dockerfile)
    paths = exclude_paths(str(context), ignore_patterns(context), dockerfile=name)
    out = []
    for rel in sorted(paths):
        try:
            out.append(Entry(rel, os.lstat(context / rel)))
        except OSError:
            continue  # gone since the walk
    return out


def sent(context: Path) -> Callable[[str], bool]:
    """Whether the build sends a path (relative to the context), by the rules `included`
    walks with: a path under an excluded folder is not sent, unless a `!` pattern reaches
    into that folder."""
    from docker.utils.build import PatternMatcher

    matcher = PatternMatcher(ignore_patterns(context))

    def sends(rel: str) -> bool:
        parts = [p for p in rel.split("/") if p]
        for depth in range(1, len(parts) + 1):
            prefix = "/".join(parts[:depth])
            if not matcher.matches(prefix):
                continue
            if depth == len(parts) or not any(
                    p.exclusion and p.cleaned_pattern.startswith(prefix)
                    for p in matcher.patterns):
                return False
        return True

    return sends


def _dockerfile_name(context: Path, dockerfile: Path) -> str | None:
    """The Dockerfile's path inside the context; None when it lies outside."""
    try:
        return str(dockerfile.resolve().relative_to(context.resolve()))
    except ValueError:
        return None


def _settings_digest(dockerfile: Path, args: dict[str, str], patterns: list[str]) -> bytes:
    h = hashlib.sha256(dockerfile.read_bytes())
    for key in sorted(args):
        h.update(f"{key}={args[key]}\0".encode())
    h.update("\0".join(patterns).encode())
    return h.digest()


def fingerprint(context: Path, entries: list[Entry], dockerfile: Path,
                args: dict[str, str]) -> str:
    """Names, types, sizes, times and inodes of what the build sends: the same fingerprint
    means the same content as far as git's own index would tell. Reads no file of them."""
    h = hashlib.sha256(_settings_digest(dockerfile, args, ignore_patterns(context)))
    for e in entries:
        s = e.st
        h.update(f"{e.path}\0{s.st_mode}\0{s.st_size}\0{s.st_mtime_ns}\0{s.st_ctime_ns}\0"
                 f"{s.st_ino}\n".encode())
    return h.hexdigest()


def content_digest(context: Path, entries: list[Entry], dockerfile: Path,
                   args: dict[str, str]) -> str:
    """Content hash of what the build sends: regular files read in chunks, a link as the
    text it holds (never followed: a link to /dev/zero or out of the context is not read),
    anything else by its name and type only."""
    h = hashlib.sha256(_settings_digest(dockerfile, args, ignore_patterns(context)))
    for e in entries:
        h.update(f"{e.path}\0{stat.S_IFMT(e.st.st_mode)}\0".encode())
        if e.is_file:
            _hash_file(h, context / e.path)
        elif stat.S_ISLNK(e.st.st_mode):
            h.update(os.readlink(context / e.path).encode(errors="surrogateescape"))
    return h.hexdigest()[:16]


def _hash_file(h: Any, path: Path) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | getattr(os, "O_NONBLOCK", 0))
    with os.fdopen(fd, "rb") as f:
        while chunk := f.read(CHUNK):
            h.update(chunk)


def cached_digest(cache_dir: Path, key: str) -> str | None:
    try:
        text = (cache_dir / "context-digests" / key).read_text().strip()
    except OSError:
        return None
    return text if len(text) == 16 and all(c in "0123456789abcdef" for c in text) else None


def remember_digest(cache_dir: Path, key: str, digest: str) -> None:
    folder = cache_dir / "context-digests"
    folder.mkdir(parents=True, exist_ok=True)
    tmp = folder / f"{key}.partial"
    tmp.write_text(digest + "\n")
    tmp.replace(folder / key)


def archive(context: Path, dockerfile: Path) -> tuple[IO[bytes], str]:
    """The build context as a tar (a temporary file) of exactly what `included` lists,
    and the name the Dockerfile has in it (one outside the context is added under a name
    of its own, as the docker SDK does)."""
    from docker.api.build import process_dockerfile
    from docker.utils.build import tar

    name, text = process_dockerfile(str(dockerfile.resolve()), str(context))
    fileobj = tar(str(context), exclude=ignore_patterns(context), dockerfile=(name, text))
    return fileobj, name
