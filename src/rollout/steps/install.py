"""Putting a release's executables on a host and checking them there: the push (each file's
sha256 read back as it lands), the install of a partial folder under the release's name, the
identities (one stat per file) that let the switch trust what this run verified without
reading it again, and the page-cache eviction of files just written.

Used by the upload (steps.release), the pull from a published bundle (steps.pull), staging
ahead (engine.staging) and the check of a release found on a host (steps.manifest).
"""

from __future__ import annotations

import json

from rollout.errors import StepFailed
from rollout.host.layout import q
from rollout.output.progress import tracker_for
from rollout.steps.base import HostContext
from rollout.steps.decision import Release, Verified

# What identifies a file on the host without reading it: size, inode, device, and the
# modification and change times in nanoseconds (any write, truncate, chmod or replacement
# moves the change time, which no user can set back).
_IDENTITY = "%s %i %d %y %z"
_MAX_IDENTITY = 200  # a line longer than this is not stat's: hostile, never a match


def _sha256s(ctx: HostContext, directory: str, names: list[str]) -> dict[str, str]:
    if not names:
        return {}
    files = " ".join(q(n) for n in names)
    # evicted after: read again, the pages would be active cache the drain counts
    r = ctx.sh(f"cd {q(directory)} 2>/dev/null && sha256sum -- {files} 2>/dev/null; "
               f"{evict_command(directory, names)} >/dev/null 2>&1")
    sums: dict[str, str] = {}
    for line in r.stdout.splitlines():
        digest, _, name = line.partition("  ")
        sums[name.strip()] = digest
    return sums


def identity_command(directory: str, names: list[str]) -> str:
    """One line per file, in the order given ("missing" for a file that is not there)."""
    files = " ".join(q(n) for n in names)
    return (f"cd {q(directory)} && for f in {files}; do "
            f"stat -c {q(_IDENTITY)} -- \"$f\" 2>/dev/null || echo missing; done")


def parse_identities(stdout: str, names: list[str]) -> dict[str, str]:
    """The identities read back (hostile data): {} unless there is one plausible line per
    file."""
    lines = stdout.splitlines()[-len(names):] if names else []
    if len(lines) != len(names) or any(
        line == "missing" or not line or len(line) > _MAX_IDENTITY for line in lines
    ):
        return {}
    return dict(zip(names, lines, strict=True))


def unchanged_since_verified(ctx: HostContext, directory: str, release: Release) -> bool:
    """Whether every executable is the very file this run verified as it wrote it: one
    stat, no read of its bytes. False when this run verified nothing there."""
    record = ctx.state.verified.of_release(release.id) if ctx.state.verified else None
    names = [a.name for a in release.artifacts]
    if not record or sorted(record) != sorted(names):
        return False
    now = parse_identities(ctx.sh(identity_command(directory, names)).stdout, names)
    return bool(now) and now == record


def release_mismatches(ctx: HostContext, directory: str, release: Release) -> list[str]:
    found = _sha256s(ctx, directory, [a.name for a in release.artifacts])
    return [a.name for a in release.artifacts if found.get(a.name) != a.sha256]


def install_staged(ctx: HostContext, release: Release) -> bool:
    """Install what staging ahead left on the host by a rename, in one round trip, if each
    executable is still the very file verified as it was staged (one stat each). False when
    there is nothing staged or it changed since (then it is removed)."""
    staged, ctx.state.staged = ctx.state.staged, None
    names = [a.name for a in release.artifacts]
    if staged is None or staged.release_id != release.id or sorted(staged.identities) != sorted(
        names
    ):
        return False
    checks = " && ".join(f'[ "$(stat -c {q(_IDENTITY)} -- {q(n)} 2>/dev/null)" = '
                         f"{q(staged.identities[n])} ]" for n in names)  # fmt: skip
    dest, root = ctx.layout.release_dir(release.id), staged.directory.rsplit("/", 1)[0]
    r = ctx.sh(f"cd {q(staged.directory)} 2>/dev/null && {checks} || exit 3; "
               f"cat > RELEASE.json && rm -rf -- {q(dest)} && "
               f"mv -T -- {q(staged.directory)} {q(dest)} && "
               f"{{ rmdir -- {q(root)} 2>/dev/null; true; }} && {identity_command(dest, names)}",
               stdin=json.dumps(release.to_dict(), indent=2))  # fmt: skip
    if r.exit_code == 3:
        ctx.sh(f"rm -rf -- {q(staged.directory)}; rmdir -- {q(root)} 2>/dev/null; true")
        return False
    r.check()
    staged.installed = True
    remember_verified(ctx, release, r.stdout)
    return True


def push_into(ctx: HostContext, release: Release, partial: str, what: str = "push",
              step: str = "upload") -> int:
    """Copy the executables from the controller into the host's partial folder (created
    there), each one's sha256 read back on the host in the same round trip as its bytes.
    Reports `progress` events (`what`: push or stage) as the bytes go."""
    total = sum(a.size for a in release.artifacts)
    tracker = tracker_for(ctx.emit, step, what, total)
    before = 0
    if tracker is not None:
        tracker.update(0)
    for artifact in release.artifacts:
        found = ctx.transport.put_and_digest(
            artifact.local_path, f"{partial}/{artifact.name}", mode=0o755,
            progress=None if tracker is None else tracker.offset(before),
        )
        before += artifact.size
        if found != artifact.sha256:
            raise StepFailed(f"sha256 mismatch on host after upload: {artifact.name} "
                             f"(sent {artifact.sha256[:12]}, host has {found[:12] or 'nothing'})")
    return sum(a.size for a in release.artifacts)


def evict_command(directory: str, names: list[str]) -> str:
    """Evict the files just written and checked from the page cache. Read twice, their pages
    are active file cache charged to the container: a 100 MiB release would count in the
    working set the drain waits on. Best effort (GNU dd's nocache; synced first): the
    command always succeeds."""
    files = " ".join(q(n) for n in names)
    return (f"{{ cd {q(directory)} && sync -- {files} && for f in {files}; do "
            'dd if="$f" iflag=nocache count=0 status=none; done; true; }')


def install_partial(
    ctx: HostContext, release: Release, partial: str, checked: bool = False
) -> None:
    """Check the executables in `partial` on the host (unless `checked`: each was as it
    landed), then, in one round trip: write RELEASE.json, evict the files from the page cache
    and rename the folder to the release's."""
    names = [a.name for a in release.artifacts]
    if not checked:
        ctx.sh(f"cd {q(partial)} && chmod 0755 -- {' '.join(q(n) for n in names)}").check()
        bad = release_mismatches(ctx, partial, release)
        if bad:
            raise StepFailed(f"sha256 mismatch on host after upload: {', '.join(bad)}")
    meta = json.dumps(release.to_dict(), indent=2)
    dest = ctx.layout.release_dir(release.id)
    r = ctx.sh(f"cat > {q(partial)}/RELEASE.json && {evict_command(partial, names)} && "
               f"rm -rf -- {q(dest)} && mv -T -- {q(partial)} {q(dest)} && "
               f"{identity_command(dest, names)}", stdin=meta).check()
    remember_verified(ctx, release, r.stdout)


def remember_verified(ctx: HostContext, release: Release, stdout: str) -> None:
    """Keep the identities of the files just verified and installed, for the switch."""
    found = parse_identities(stdout, [a.name for a in release.artifacts])
    if found:
        ctx.state.verified = Verified(release.id, tuple(sorted(found.items())))
    else:
        ctx.state.verified = None
