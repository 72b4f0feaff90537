"""The `current` symlink: which release a host serves, and the one it served before."""

from __future__ import annotations

from rollout.errors import StepFailed
from rollout.host.layout import is_release_id, q
from rollout.host.reports import PointReport
from rollout.steps.base import HostContext


def current_release(ctx: HostContext) -> str | None:
    r = ctx.sh(f"readlink -- {q(ctx.layout.current)}")
    release_id = r.stdout.strip().rsplit("/", 1)[-1]
    return release_id if r.ok and is_release_id(release_id) else None


def point_current_at(ctx: HostContext, release_id: str) -> None:
    """Atomically repoint current (ops.point_current: a new link renamed over the old one);
    StepFailed when the host refused (no such release there, not a release id)."""
    report = PointReport.parse(ctx.call("point_current", root=ctx.layout.root,
                                        release=release_id))
    if report.outcome not in ("pointed", "kept"):
        raise StepFailed(f"could not point current at {release_id}: {report.reason}",
                         retryable=False)


def recorded_previous(ctx: HostContext) -> str | None:
    """The release current pointed at before the last switch (survives a dead controller)."""
    r = ctx.sh(f"cat -- {q(ctx.layout.previous_release)} 2>/dev/null")
    release_id = r.stdout.strip()
    return release_id if r.ok and is_release_id(release_id) else None
