"""The `current` symlink: which release a host serves, and the one it served before."""

from __future__ import annotations

from rollout.host.layout import is_release_id
from rollout.host.reports import PointedReport
from rollout.steps.base import HostContext


def _pointed(ctx: HostContext) -> PointedReport:
    return PointedReport.parse(ctx.call("pointed", root=ctx.layout.root))


def current_release(ctx: HostContext) -> str | None:
    release_id = _pointed(ctx).current
    return release_id if release_id and is_release_id(release_id) else None


def recorded_previous(ctx: HostContext) -> str | None:
    """The release current pointed at before the last switch (survives a dead controller)."""
    release_id = _pointed(ctx).previous
    return release_id if release_id and is_release_id(release_id) else None
