"""Putting a release's executables on a host and checking them there: the push (each file's
sha256 read back as it lands), the install of a partial folder under the release's name, the
identities (one stat per file) that let the switch trust what this run verified without
reading it again, and the page-cache eviction of files just written.

Used by the upload (steps.release), the pull from a published bundle (steps.pull), staging
ahead (engine.staging) and the check of a release found on a host (steps.manifest).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import BinaryIO

from rollout.errors import StepFailed
from rollout.host.reports import FilesReport
from rollout.jsontypes import JSON
from rollout.output.progress import tracker_for
from rollout.readfile import UnreadableFile
from rollout.steps.base import HostContext
from rollout.steps.decision import Artifact, Release, Verified


def file_sums(ctx: HostContext, directory: str, names: list[str],
              mode: int | None = None) -> dict[str, str]:
    """Each file's sha256 as the host read it (one missing or not a regular file: left
    out), made `mode` first where given; evicted from the page cache once read (read again,
    its pages would be active cache the drain counts)."""
    if not names:
        return {}
    extra: dict[str, JSON] = {} if mode is None else {"mode": mode}
    return FilesReport.parse(ctx.call("file_sums", directory=directory, names=names,
                                      **extra)).sums


def identities_of(report: FilesReport, names: list[str]) -> dict[str, str]:
    """The identities read back (hostile data): {} unless there is one for each file."""
    found = {n: report.identities[n] for n in names if n in report.identities}
    return found if names and len(found) == len(names) else {}


def unchanged_since_verified(ctx: HostContext, directory: str, release: Release) -> bool:
    """Whether every executable is the very file this run verified as it wrote it: one
    stat, no read of its bytes. False when this run verified nothing there."""
    record = ctx.state.verified.of_release(release.id) if ctx.state.verified else None
    names = [a.name for a in release.artifacts]
    if not record or sorted(record) != sorted(names):
        return False
    now = identities_of(FilesReport.parse(ctx.call("identities", directory=directory,
                                                   names=names)), names)
    return bool(now) and now == record


def mismatches(release: Release, sums: dict[str, str]) -> list[str]:
    """The executables whose sha256 on the host is not the release's."""
    return [a.name for a in release.artifacts if sums.get(a.name) != a.sha256]


def release_mismatches(ctx: HostContext, directory: str, release: Release) -> list[str]:
    return mismatches(release, file_sums(ctx, directory, [a.name for a in release.artifacts]))


def _install(ctx: HostContext, release: Release, partial: str,
             expect: dict[str, str] | None = None) -> FilesReport:
    """ops.install_release: the folder `partial` renamed to the release's, its manifest
    written and its files evicted from the page cache, in one round trip."""
    names = [a.name for a in release.artifacts]
    extra: dict[str, JSON] = {} if expect is None else {"expect": dict(expect)}
    return FilesReport.parse(ctx.call(
        "install_release", runtime=("partial", "manifest"), root=ctx.layout.root,
        release=release.id, partial=partial, manifest=json.dumps(release.to_dict(), indent=2),
        names=list(names), **extra))


def install_staged(ctx: HostContext, release: Release) -> bool:
    """Install what staging ahead left on the host by a rename, in one round trip, if each
    executable is still the very file verified as it was staged (one stat each). False when
    there is nothing staged or it changed since (then it is removed, in that round trip)."""
    staged, ctx.state.staged = ctx.state.staged, None
    names = [a.name for a in release.artifacts]
    if staged is None or staged.release_id != release.id or sorted(staged.identities) != sorted(
        names
    ):
        return False
    report = _install(ctx, release, staged.directory, staged.identities)
    if report.outcome in ("changed", "missing"):
        return False
    _installed(ctx, release, report)
    staged.installed = True
    return True


def push_into(ctx: HostContext, release: Release, partial: str, what: str = "push",
              step: str = "upload") -> int:
    """Copy the executables from the controller into the host's partial folder (created
    there), each one's sha256 read back on the host in the same round trip as its bytes.
    What is sent is what was hashed: each file is opened once (never through a link), found
    to be the release's, then sent from that same descriptor. Reports `progress` events
    (`what`: push or stage) as the bytes go."""
    total = sum(a.size for a in release.artifacts)
    tracker = tracker_for(ctx.emit, step, what, total)
    before = 0
    if tracker is not None:
        tracker.update(0)
    for artifact in release.artifacts:
        ctx.record("put", {"name": artifact.name, "sha256": artifact.sha256,
                           "size": artifact.size, "path": f"{partial}/{artifact.name}"}, ("path",))
        with verified_executable(artifact) as src:
            found = ctx.transport.put_and_digest(
                src, f"{partial}/{artifact.name}", mode=0o755,
                progress=None if tracker is None else tracker.offset(before),
            )
        before += artifact.size
        if found != artifact.sha256:
            raise StepFailed(f"sha256 mismatch on host after upload: {artifact.name} "
                             f"(sent {artifact.sha256[:12]}, host has {found[:12] or 'nothing'})")
    return sum(a.size for a in release.artifacts)


@contextmanager
def verified_executable(artifact: Artifact) -> Iterator[BinaryIO]:
    """The controller's copy of `artifact`, open and rewound, once its bytes were found to
    be the release's. A link, anything but a regular file, or a file that is no longer the
    one checked is refused before a byte is sent (StepFailed, not retried)."""
    from rollout.bundle.local import open_executable, sha256_of  # where a release is sent

    try:
        src = open_executable(Path(artifact.local_path))
    except UnreadableFile as e:
        raise StepFailed(f"{artifact.name} not sent: {e}", retryable=False) from None
    with src:
        if sha256_of(src) != artifact.sha256:
            raise StepFailed(f"{artifact.name} not sent: the controller's copy is no longer "
                             f"the release's (sha256 {artifact.sha256[:12]}): it changed since "
                             "it was checked", retryable=False)
        src.seek(0)
        yield src


def install_partial(
    ctx: HostContext, release: Release, partial: str, checked: bool = False
) -> None:
    """Check the executables in `partial` on the host (unless `checked`: each was as it
    landed), then, in one round trip: write RELEASE.json, evict the files from the page cache
    and rename the folder to the release's."""
    names = [a.name for a in release.artifacts]
    if not checked:
        bad = mismatches(release, file_sums(ctx, partial, names, mode=0o755))
        if bad:
            raise StepFailed(f"sha256 mismatch on host after upload: {', '.join(bad)}")
    _installed(ctx, release, _install(ctx, release, partial))


def _installed(ctx: HostContext, release: Release, report: FilesReport) -> None:
    """Fail unless the host installed the release; keep the identities of the files just
    verified and installed, for the switch."""
    if report.outcome != "installed":
        raise StepFailed(f"release {release.id} not installed on host: {report.reason}")
    found = identities_of(report, [a.name for a in release.artifacts])
    ctx.state.verified = Verified(release.id, tuple(sorted(found.items()))) if found else None
