"""prune: remove old releases, never the new one or the one before it."""

from __future__ import annotations

from typing import NamedTuple

from pydantic import Field

from rollout.config.steps import KindRule, StrictParams
from rollout.errors import StepFailed
from rollout.host.facts import HostFacts
from rollout.host.reports import Report
from rollout.output.events import StepResult, changed
from rollout.steps.base import HostContext, Kind
from rollout.steps.config import forget_call, forget_configs
from rollout.steps.decision import (
    Action,
    Call,
    Decision,
    Skip,
    Target,
)
from rollout.steps.release import RELEASE_ID


class PruneParams(StrictParams):
    keep: int | None = Field(default=None, ge=1, description="Releases kept (release.keep).")


class Pruning(NamedTuple):
    """What decide_prune fixed for prune: the releases to remove, and how many stay."""

    doomed: list[str]
    kept: int


def decide(facts: HostFacts, target: Target, params: PruneParams) -> Decision:
    """Which releases go: all but the newest `keep`, never the new one or the one before it."""
    keep = params.keep or target.settings.release.keep
    if target.pending:
        return Action(f"remove all but {keep} releases", params, Pruning([], 0),
                      calls=prune_calls(target, []))
    newest_first = [r.id for r in reversed(facts.releases) if RELEASE_ID.match(r.id)]
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
                  Pruning(doomed, len(kept)), calls=prune_calls(target, doomed))


def prune_calls(target: Target, doomed: list[str]) -> tuple[Call, ...]:
    """ops.prune, then the configs kept for the releases it removed."""
    prune = Call("prune", {"root": target.layout.root, "releases": list(doomed)})
    return (prune, forget_call(target, doomed)) if doomed else (prune,)


def apply(ctx: HostContext, action: Action) -> StepResult:
    doomed, kept = action.detail_as(Pruning)
    prune, *forget = action.calls
    report = Report.parse(ctx.run_call(prune))
    if report.outcome not in ("pruned", "none"):
        raise StepFailed(f"prune: {report.reason}")
    for call in forget:
        forget_configs(ctx, call)
    return changed(f"pruned {len(doomed)} old release(s), kept {kept}", pruned=doomed)


KIND = Kind("prune", PruneParams, KindRule(None), place=110, decide=decide, apply=apply)
