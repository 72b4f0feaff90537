"""`--release DIR|URL`: the release a rollout deploys, from a bundle built elsewhere."""

from __future__ import annotations

from pathlib import Path
from urllib.parse import urlsplit

from rollout.bundle.local import open_bundle
from rollout.bundle.release import Release
from rollout.bundle.remote import remote_release
from rollout.config.playbook import parse_set_options
from rollout.errors import UserError

REMOTE_SCHEMES = ("http", "https", "s3")


def is_url(ref: str) -> bool:
    return urlsplit(ref).scheme in REMOTE_SCHEMES


def load_release(ref: str, cache: Path) -> Release:
    """A local bundle, checked byte for byte; or a published one's manifest, whose
    executables the hosts download and check themselves (the controller's own copy, for a
    host that cannot reach them, goes under `cache`)."""
    if is_url(ref):
        return remote_release(ref, cache)
    folder = Path(ref)
    if not folder.is_dir():
        raise UserError(f"--release {ref}: no such folder (a bundle from `rollout build`)")
    return open_bundle(folder)


def sets_with_version(sets: tuple[str, ...], release: Release) -> tuple[str, ...]:
    """--set values with `version` taken from the bundle; a different --set version is an
    error rather than a release that says it is something it is not."""
    given = parse_set_options(sets).get("version")
    if given is None:
        return (*sets, f"version={release.version}")  # --set values are strings
    if str(given) != release.version:
        raise UserError(
            f"--set version={given} but the bundle {release.id} is version {release.version}"
        )
    return sets
