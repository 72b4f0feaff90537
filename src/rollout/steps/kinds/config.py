"""config: render the daemon's TOML with a memory budget that fits the cgroup limit."""

from __future__ import annotations

import hashlib

from rollout.config.steps import KindRule, NoParams
from rollout.errors import StepFailed
from rollout.host.facts import HostFacts
from rollout.host.reports import Report
from rollout.output.events import StepResult, changed, ok
from rollout.steps.base import HostContext, Kind
from rollout.steps.config import ConfigText, render
from rollout.steps.decision import (
    Action,
    Decision,
    Skip,
    Target,
)
from rollout.steps.preflight_inputs import leftover_pce_tmp


def _serves(facts: HostFacts, target: Target) -> bool:
    """The host already serves the release rolled out: nothing is stopped or started."""
    rid = target.release_id
    return rid is not None and facts.serves(rid, target.layout.release_dir(rid))


def decide(facts: HostFacts, target: Target, params: NoParams) -> Decision:
    path = target.settings.daemon.config_path
    try:
        config = render(facts, target)
    except StepFailed as e:  # the budget cannot be sized: the plan shows it failing
        return Action(f"write {path}", params, fails=str(e))
    if facts.digest(path) == hashlib.sha256(config.text.encode()).hexdigest():
        if not _serves(facts, target):  # a daemon starts after this: clear its way
            return Action(f"{path} already up to date (budget {config.budget_text}); remove "
                          "a leftover PCE temporary, if any", params, config)
        return Skip(f"{path} already up to date (budget {config.budget_text})")
    return Action(f"write {path}: total_budget {config.budget_text}", params, config)


def apply(ctx: HostContext, action: Action) -> StepResult:
    daemon = ctx.settings.daemon
    config = action.detail_as(ConfigText)
    # one round trip: the config's folder and param_cache made, the kept copies private
    made = Report.parse(ctx.call("config_folders", config_path=daemon.config_path,
                                 param_cache=daemon.param_cache))
    if made.outcome not in ("made", "kept"):
        raise StepFailed(made.reason or f"{daemon.config_path}: folders not made",
                         retryable=False)
    note = leftover_pce_tmp(ctx)  # after the stop: no daemon writes it now
    also = f"; {note}" if note else ""
    if not ctx.write_if_changed(daemon.config_path, config.text, config.keep_as):
        same = f"{daemon.config_path} already up to date (budget {config.budget_text}){also}"
        return changed(same) if note and note.startswith("removed") else ok(same)
    return changed(
        f"wrote {daemon.config_path}: total_budget {config.budget_text}{also}",
        total_budget=config.budget,
        extra_config=daemon.extra_config,
    )


KIND = Kind("config", NoParams,
            # the new config is written only once the old daemon is stopped (the guard armed):
            # a run refused or lost before the stop leaves the running release's config as it was
            KindRule("stopped", after=("stop",), changes=True, moved_after="stop"),
            place=60, decide=decide, apply=apply)
