"""A release as its manifest on the host (RELEASE.json, beside the executables) describes it,
checked before anything is switched to it.

Everything read from a host is hostile: the release id and the executable names must match
strict patterns, the id must be the digest of the executables the manifest lists, and each
executable's sha256 on the host must be the one listed.
"""

from __future__ import annotations

import json
import re

from rollout.bundle.release import release_id_of
from rollout.errors import StepFailed
from rollout.host.layout import EXECUTABLE_NAME, is_release_id
from rollout.host.reports import FilesReport
from rollout.jsontypes import JSON
from rollout.steps.base import Artifact, HostContext, Release
from rollout.steps.install import mismatches

SHA256 = re.compile(r"[0-9a-f]{64}")


def _refuse(ctx: HostContext, release_id: str, why: str) -> StepFailed:
    return StepFailed(f"release {release_id} on {ctx.name}: {why}; not switching to it",
                      retryable=False)


def _artifacts(ctx: HostContext, release_id: str, meta: JSON) -> tuple[Artifact, ...]:
    listed = meta.get("artifacts") if isinstance(meta, dict) else None
    if not isinstance(listed, dict) or not listed:
        raise _refuse(ctx, release_id, "RELEASE.json lists no executables")
    out = []
    for name, entry in listed.items():
        sha = entry.get("sha256") if isinstance(entry, dict) else None
        size = entry.get("size") if isinstance(entry, dict) else None
        if not re.fullmatch(EXECUTABLE_NAME, name) or ".." in name:
            raise _refuse(ctx, release_id, f"RELEASE.json names an executable {name[:40]!r}")
        if not isinstance(sha, str) or not SHA256.fullmatch(sha):
            raise _refuse(ctx, release_id, f"RELEASE.json has no sha256 for {name}")
        out.append(Artifact(name, "", sha, size if isinstance(size, int) else 0))
    return tuple(out)


def read_release(ctx: HostContext, release_id: str) -> Release:
    """The release `release_id` on this host, its manifest and executables checked."""
    if not is_release_id(release_id):
        raise StepFailed(f"{release_id[:40]!r} is not a release id", retryable=False)
    # one round trip: the manifest and the sha256 of each executable it lists
    found = FilesReport.parse(ctx.call("read_release", root=ctx.layout.root,
                                       release=release_id))
    if found.outcome != "read":
        raise StepFailed(f"release {release_id} is not on {ctx.name}", retryable=False)
    try:
        meta = json.loads(found.manifest)
    except ValueError:
        raise _refuse(ctx, release_id, "its RELEASE.json is not JSON") from None
    artifacts = _artifacts(ctx, release_id, meta)
    if release_id_of(artifacts) != release_id:
        raise _refuse(ctx, release_id, "RELEASE.json lists executables of another release")
    release = Release(release_id, str(meta.get("image", "")), str(meta.get("version", "")),
                      artifacts)
    bad = mismatches(release, found.sums)
    if bad:
        raise _refuse(ctx, release_id, f"sha256 of {', '.join(bad)} does not match RELEASE.json")
    return release
