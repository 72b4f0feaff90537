"""switch: point current at the release (a rollback: back at the one before, with its config)."""

from __future__ import annotations

from dataclasses import dataclass

from pydantic import Field

from rollout.config.steps import KindRule, StrictParams
from rollout.errors import StepFailed
from rollout.host.facts import HostFacts
from rollout.output.events import StepResult
from rollout.steps.base import HostContext, Kind, judged
from rollout.steps.config import config_of
from rollout.steps.daemon import serving
from rollout.steps.decision import (
    Action,
    Call,
    Decision,
    Release,
    Skip,
    Target,
    write_call,
)
from rollout.steps.install import release_mismatches, unchanged_since_verified
from rollout.steps.release import need_release, without_release


class SwitchParams(StrictParams):
    restore_config: bool = Field(
        default=False, description="Also bring back the config the release last ran with."
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


def decide(facts: HostFacts, target: Target, params: SwitchParams) -> Decision:
    release = target.release
    if release is None:
        return without_release(target, params, "point current at")
    skip = serving(facts, target)
    if skip:
        return Skip(f"{skip.reason}: current already points at it", {"release": release.id})
    before = facts.current_release
    if before == release.id:
        return Skip(f"current already points at {release.id}", {"release": release.id})
    keep = (write_call(target.layout.previous_release, before, if_changed=False),) if before else ()
    return Action(f"current: {before or 'none'} -> {release.id}", params, Switch(before),
                  calls=(check_call(facts, target, release), *keep,
                         *switch_calls(target, release.id, params.restore_config)))


def check_call(facts: HostFacts, target: Target, release: Release) -> Call:
    """The read that finds the release complete: the identities of the files this run's
    upload verifies (one stat each), or, where it uploads nothing, their sha256 (a file
    changed since it was verified is then read whole, too)."""
    directory = target.layout.release_dir(release.id)
    names = [a.name for a in release.artifacts]
    uploads = any(facts.digest(f"{directory}/{a.name}") != a.sha256 for a in release.artifacts)
    return Call("identities" if uploads else "file_sums", {"directory": directory, "names": names})


def apply(ctx: HostContext, action: Action) -> StepResult:
    how = action.detail_as(Switch)
    checked = None if how.back else _check_release(ctx, need_release(ctx))
    for call in action.calls:
        if call.name == "write_file":  # previous_release
            ctx.write(call)
    calls = [c for c in action.calls if c.name in ("point_current", "restore_config")]
    result = judged("switch", calls, ctx.run_calls(calls), retryable=False)
    if checked:
        result.data["checked"] = checked
    return result


def _check_release(ctx: HostContext, release: Release) -> str:
    """How the release's files were found complete (the action's check_call): by the
    identity this run read as it verified them (unchanged since: not read again), else by
    sha256."""
    directory = ctx.layout.release_dir(release.id)
    checked = "identity" if unchanged_since_verified(ctx, directory, release) else "sha256"
    if checked == "sha256" and release_mismatches(ctx, directory, release):
        raise StepFailed(f"release {release.id} is not complete on host", retryable=False)
    return checked


def undo(target: Target, facts: HostFacts, params: SwitchParams, to: str | None) -> Action:
    """A rollback's switch (rollback_plan names `to` for every plan that switches)."""
    return switch_back(target, str(to))


KIND = Kind("switch", SwitchParams,
            # switch points current at the release the upload put on the host (and verified)
            KindRule("switched", enters="switched", needs=("upload",), changes=True),
            place=70, decide=decide, apply=apply, undo=undo,
            # `rollout rollback` switches back to an earlier release: with the config it ran with
            rollback_params={"restore_config": True})
