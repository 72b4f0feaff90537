"""A bundle in a local folder: write one from an extracted release, open one and check it."""

from __future__ import annotations

import hashlib
import os
import shutil
from collections.abc import Mapping
from pathlib import Path

from rollout.bundle.manifest import MANIFEST, Executable, Manifest, parse_manifest
from rollout.bundle.release import Release
from rollout.errors import Location, UserError

CHUNK = 1 << 20


def file_sha256(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        while chunk := f.read(CHUNK):
            h.update(chunk)
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
    """Each executable that is missing, or whose size or sha256 differs from the manifest."""
    problems = []
    for name, meta in executables.items():
        path = folder / name
        if not path.is_file():
            problems.append(f"{name} is missing")
        elif path.stat().st_size != meta.size:
            problems.append(f"{name} is {path.stat().st_size} bytes, the manifest says {meta.size}")
        elif file_sha256(path) != meta.sha256:
            problems.append(f"{name} sha256 differs from the manifest's {meta.sha256[:12]}")
    return problems


def read_manifest(folder: Path) -> Manifest:
    path = folder / MANIFEST
    if not path.is_file():
        raise UserError(f"{folder} is not a release bundle: no {MANIFEST} (see `rollout build`)")
    return parse_manifest(path.read_text(encoding="utf-8", errors="replace"), str(path))


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
