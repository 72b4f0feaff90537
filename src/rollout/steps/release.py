"""Put a release on a host, point current at it, prune old ones."""

from __future__ import annotations

import contextlib
import re
import uuid
from dataclasses import dataclass
from typing import NamedTuple

from pydantic import BaseModel

from rollout.config.steps import NoParams, PruneParams, SwitchParams
from rollout.errors import StepFailed, TransportError
from rollout.host.facts import HostFacts
from rollout.host.reports import Report
from rollout.output.events import StepResult, changed
from rollout.steps.base import HostContext, judged
from rollout.steps.config import config_of, forget_configs_of
from rollout.steps.daemon import serving
from rollout.steps.decision import Action, Call, Decision, Release, Skip, Target
from rollout.steps.install import (
    install_partial,
    install_staged,
    push_into,
    release_mismatches,
    unchanged_since_verified,
)
from rollout.steps.pull import pull_release

_RELEASE_ID = re.compile(r"^[0-9a-f]{12}$")


def _need_release(ctx: HostContext) -> Release:
    if ctx.release is None:
        raise StepFailed("no release to deploy: the extract step has not run", retryable=False)
    return ctx.release


NO_RELEASE = "no release to deploy: the extract step has not run"


def _without_release(target: Target, params: BaseModel, what: str) -> Action:
    if target.pending:
        return Action(f"{what} the new build (its release is known after the build)", params)
    return Action(what, params, fails=NO_RELEASE)


def decide_upload(facts: HostFacts, target: Target, params: NoParams) -> Decision:
    release = target.release
    if release is None:
        return _without_release(target, params, "upload")
    dest = target.layout.release_dir(release.id)
    missing = [a for a in release.artifacts if facts.digest(f"{dest}/{a.name}") != a.sha256]
    if not missing:
        reason = f"release {release.id} already on host, sha256 matches"
        return Skip(reason, {"release": release.id})
    size = sum(a.size for a in missing)
    names = ", ".join(a.name for a in missing)
    return Action(f"upload release {release.id}: {names} ({size} bytes)", params)


def upload(ctx: HostContext, action: Action) -> StepResult:
    release = _need_release(ctx)
    if release.source:  # a published bundle: the host downloads it itself
        return pull_release(ctx, release)
    if install_staged(ctx, release):
        return changed(
            f"installed release {release.id}, staged during the canary (sha256 verified as "
            "written)", release=release.id, bytes=0, staged=True,
        )  # fmt: skip
    partial = f"{ctx.layout.releases}/.partial-{release.id}-{uuid.uuid4().hex[:8]}"
    try:
        push_into(ctx, release, partial)
        install_partial(ctx, release, partial, checked=True)
    except BaseException:
        with contextlib.suppress(TransportError, StepFailed):  # the original error stays
            ctx.call("remove_partial", root=ctx.layout.root, name=partial.rsplit("/", 1)[-1])
        raise
    size = sum(a.size for a in release.artifacts)
    return changed(
        f"uploaded release {release.id} ({size} bytes), sha256 verified on host",
        release=release.id,
        bytes=size,
    )


@dataclass(frozen=True)
class Switch:
    """What decide_switch fixed: what current pointed at (kept as the previous release);
    `back`: a rollback's switch, current back at a release that served here before."""

    before: str | None
    back: bool = False


def switch_calls(target: Target, release_id: str, restore: bool) -> tuple[Call, ...]:
    """ops.point_current (a new link renamed over current), then, where asked, ops.
    restore_config: the config that release last ran with, put back."""
    path = target.settings.daemon.config_path
    point = Call("point_current", {"root": target.layout.root, "release": release_id})
    if not restore:
        return (point,)
    return point, Call("restore_config", {"config_path": path,
                                          "kept_config": config_of(path, release_id)})


def switch_back(target: Target, to: str) -> Action:
    """A rollback's switch: current back at `to`, with the config it ran with."""
    return Action(f"point current back at {to}, with its config", SwitchParams(),
                  Switch(None, back=True), calls=switch_calls(target, to, True))


def decide_switch(facts: HostFacts, target: Target, params: SwitchParams) -> Decision:
    release = target.release
    if release is None:
        return _without_release(target, params, "point current at")
    skip = serving(facts, target)
    if skip:
        return Skip(f"{skip.reason}: current already points at it", {"release": release.id})
    before = facts.current_release
    if before == release.id:
        return Skip(f"current already points at {release.id}", {"release": release.id})
    return Action(f"current: {before or 'none'} -> {release.id}", params, Switch(before),
                  calls=switch_calls(target, release.id, params.restore_config))


def switch(ctx: HostContext, action: Action) -> StepResult:
    how = action.detail_as(Switch)
    checked = None if how.back else _check_release(ctx, _need_release(ctx))
    if how.before:
        ctx.write_file(["write", ctx.layout.previous_release], how.before)
    result = judged("switch", action.calls, ctx.run_calls(action.calls), retryable=False)
    if checked:
        result.data["checked"] = checked
    return result


def _check_release(ctx: HostContext, release: Release) -> str:
    """How the release's files were found complete: by the identity this run read as it
    verified them (unchanged since: not read again), else by sha256."""
    directory = ctx.layout.release_dir(release.id)
    checked = "identity" if unchanged_since_verified(ctx, directory, release) else "sha256"
    if checked == "sha256" and release_mismatches(ctx, directory, release):
        raise StepFailed(f"release {release.id} is not complete on host", retryable=False)
    return checked


class Pruning(NamedTuple):
    """What decide_prune fixed for prune: the releases to remove, and how many stay."""

    doomed: list[str]
    kept: int


def decide_prune(facts: HostFacts, target: Target, params: PruneParams) -> Decision:
    """Which releases go: all but the newest `keep`, never the new one or the one before it."""
    keep = params.keep or target.settings.release.keep
    if target.pending:
        return Action(f"remove all but {keep} releases", params, Pruning([], 0))
    newest_first = [r.id for r in reversed(facts.releases) if _RELEASE_ID.match(r.id)]
    rid = target.release_id or facts.current_release
    if rid and rid not in newest_first:
        newest_first.insert(0, rid)  # uploaded by this run
    protected = {rid, facts.current_release}
    kept = [r for r in newest_first if r in protected]
    for r in newest_first:
        if len(kept) < keep and r not in kept:
            kept.append(r)
    doomed = [r for r in newest_first if r not in kept]
    if not doomed:
        return Skip(f"{len(newest_first)} release(s) on host, keeping up to {keep}")
    return Action(f"remove {len(doomed)} old release(s): {', '.join(doomed)}", params,
                  Pruning(doomed, len(kept)))


def prune(ctx: HostContext, action: Action) -> StepResult:
    doomed, kept = action.detail_as(Pruning)
    report = Report.parse(ctx.call("prune", root=ctx.layout.root, releases=list(doomed)))
    if report.outcome not in ("pruned", "none"):
        raise StepFailed(f"prune: {report.reason}")
    forget_configs_of(ctx, doomed)
    return changed(f"pruned {len(doomed)} old release(s), kept {kept}", pruned=doomed)
