"""A bundle in a local folder: write one from an extracted release, open one and check it."""

from __future__ import annotations

import hashlib
import os
import shutil
import stat
import threading
from collections.abc import Mapping
from pathlib import Path
from typing import BinaryIO

from rollout.bundle.manifest import MANIFEST, MAX_MANIFEST, Executable, Manifest, parse_manifest
from rollout.bundle.release import Release
from rollout.errors import Location, UserError
from rollout.readfile import UnreadableFile, read_text

CHUNK = 1 << 20
EXECUTABLE = "release executable"
_KINDS = {stat.S_IFLNK: "a link", stat.S_IFDIR: "a folder", stat.S_IFIFO: "a FIFO"}


def open_executable(path: Path) -> BinaryIO:
    """`path` open for reading: a regular file when looked at (lstat), opened without
    following a link (O_NOFOLLOW) and still that very file once open. A link, a folder, a
    FIFO or anything else is refused (UnreadableFile) without reading a byte."""
    try:
        seen = os.lstat(path)
    except OSError as e:
        raise UnreadableFile(path, EXECUTABLE, _missing(e)) from None
    if not stat.S_ISREG(seen.st_mode):
        kind = _KINDS.get(stat.S_IFMT(seen.st_mode), "not a regular file")
        raise UnreadableFile(path, EXECUTABLE, f"is {kind}: a bundle holds regular files only")
    flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC
    try:
        fd = os.open(path, flags)
    except OSError as e:
        raise UnreadableFile(path, EXECUTABLE, _missing(e)) from None
    if not os.path.samestat(os.fstat(fd), seen):
        os.close(fd)
        raise UnreadableFile(path, EXECUTABLE, "was replaced while it was opened")
    return os.fdopen(fd, "rb")


def _missing(e: OSError) -> str:
    return "is missing" if isinstance(e, FileNotFoundError) else f"cannot be opened: {e.strerror}"


_digests: dict[tuple[int, ...], str] = {}
_digests_lock = threading.Lock()


def sha256_of(f: BinaryIO) -> str:
    """The sha256 of the open file `f`, read from its start (seek before reading it again).
    Hashed once per process for as long as the file is unchanged: the same device, inode,
    size, mtime and ctime (any write changes the ctime) give the digest read before."""
    before = os.fstat(f.fileno())
    key = (before.st_dev, before.st_ino, before.st_size, before.st_mtime_ns, before.st_ctime_ns)
    with _digests_lock:
        if key in _digests:
            return _digests[key]
    f.seek(0)
    h = hashlib.sha256()
    while chunk := f.read(CHUNK):
        h.update(chunk)
    after = os.fstat(f.fileno())
    if (after.st_size, after.st_mtime_ns, after.st_ctime_ns) == key[2:]:
        with _digests_lock:
            _digests[key] = h.hexdigest()
    return h.hexdigest()


def _copy_atomic(src: Path, dest: Path) -> None:
    tmp = dest.with_name(f".{dest.name}.partial")
    shutil.copyfile(src, tmp)
    os.chmod(tmp, 0o755)
    tmp.replace(dest)


def write_bundle(out: Path, release: Release, manifest: Manifest) -> None:
    """The executables, then the manifest (last: a folder with a manifest is complete)."""
    out.mkdir(parents=True, exist_ok=True)
    (out / MANIFEST).unlink(missing_ok=True)
    for artifact in release.artifacts:
        _copy_atomic(Path(artifact.local_path), out / artifact.name)
    problems = bundle_problems(out, manifest.executables)
    if problems:
        raise UserError(f"bundle written to {out} does not check: {'; '.join(problems)}")
    tmp = out / f".{MANIFEST}.partial"
    tmp.write_text(manifest.to_json())
    tmp.replace(out / MANIFEST)


def bundle_problems(folder: Path, executables: Mapping[str, Executable]) -> list[str]:
    """Each executable that is missing, not a regular file (a link, a folder, a FIFO), or
    whose size or sha256 differs from the manifest."""
    problems = []
    for name, meta in executables.items():
        try:
            with open_executable(folder / name) as f:
                size = os.fstat(f.fileno()).st_size
                if size != meta.size:
                    problems.append(f"{name} is {size} bytes, the manifest says {meta.size}")
                elif sha256_of(f) != meta.sha256:
                    problems.append(f"{name} sha256 differs from the manifest's "
                                    f"{meta.sha256[:12]}")
        except UnreadableFile as e:
            problems.append(f"{name} {e.why}")
    return problems


def read_manifest(folder: Path) -> Manifest:
    path = folder / MANIFEST
    if not path.exists() and not path.is_symlink():
        raise UserError(f"{folder} is not a release bundle: no {MANIFEST} (see `rollout build`)")
    if path.is_symlink():
        raise UnreadableFile(path, "bundle manifest", "is a link: a bundle holds regular files "
                             "only")
    text = read_text(path, "bundle manifest", limit=MAX_MANIFEST)
    return parse_manifest(text, str(path))


def open_bundle(folder: Path) -> Release:
    """The bundle's release, after every executable was checked against the manifest.
    A tampered or truncated executable is refused (exit 2) before any host is touched."""
    manifest = read_manifest(folder)
    problems = bundle_problems(folder, manifest.executables)
    if problems:
        raise UserError(
            "refused: " + "; ".join(problems), Location(str(folder / MANIFEST), None, "executables")
        )
    return manifest.release_for(str(folder.resolve()))
