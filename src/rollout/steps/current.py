"""The `current` symlink: which release a host serves, and the one it served before."""

from __future__ import annotations

from rollout.errors import StepFailed
from rollout.host.layout import is_release_id
from rollout.host.reports import PointedReport, PointReport
from rollout.steps.base import HostContext


def _pointed(ctx: HostContext) -> PointedReport:
    return PointedReport.parse(ctx.call("pointed", root=ctx.layout.root))


def current_release(ctx: HostContext) -> str | None:
    release_id = _pointed(ctx).current
    return release_id if release_id and is_release_id(release_id) else None


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
    release_id = _pointed(ctx).previous
    return release_id if release_id and is_release_id(release_id) else None
