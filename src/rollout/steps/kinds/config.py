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
    Call,
    Decision,
    Skip,
    Target,
    write_call,
)
from rollout.steps.preflight_inputs import pce_tmp_name


def _serves(facts: HostFacts, target: Target) -> bool:
    """The host already serves the release rolled out: nothing is stopped or started."""
    rid = target.release_id
    return rid is not None and facts.serves(rid, target.layout.release_dir(rid))


def config_calls(target: Target, config: ConfigText | None) -> tuple[Call, ...]:
    """The config's folder and param_cache made (the kept copies private), a leftover PCE
    temporary removed (after the stop: no daemon writes it now), then the config written
    where `config` is given, the running release's copy kept."""
    daemon, spec = target.settings.daemon, target.settings.params
    tmp = f"{daemon.param_cache.rstrip('/')}/{pce_tmp_name(spec.pce_file)}"
    calls = (Call("config_folders", {"config_path": daemon.config_path,
                                     "param_cache": daemon.param_cache}),
             Call("remove_files", {"paths": [tmp]}, 60))
    if config is None:
        return calls
    return (*calls, write_call(daemon.config_path, config.text, config.keep_as))


def decide(facts: HostFacts, target: Target, params: NoParams) -> Decision:
    path = target.settings.daemon.config_path
    try:
        config = render(facts, target)
    except StepFailed as e:  # the budget cannot be sized: the plan shows it failing
        return Action(f"write {path}", params, fails=str(e))
    if facts.digest(path) == hashlib.sha256(config.text.encode()).hexdigest():
        if not _serves(facts, target):  # a daemon starts after this: clear its way
            return Action(f"{path} already up to date (budget {config.budget_text}); remove "
                          "a leftover PCE temporary, if any", params, config,
                          calls=config_calls(target, None))
        return Skip(f"{path} already up to date (budget {config.budget_text})")
    return Action(f"write {path}: total_budget {config.budget_text}", params, config,
                  calls=config_calls(target, config))


def apply(ctx: HostContext, action: Action) -> StepResult:
    daemon = ctx.settings.daemon
    config = action.detail_as(ConfigText)
    folders, leftover, *write = action.calls
    made = Report.parse(ctx.run_call(folders))
    if made.outcome not in ("made", "kept"):
        raise StepFailed(made.reason or f"{daemon.config_path}: folders not made",
                         retryable=False)
    note = _leftover(ctx, leftover)
    also = f"; {note}" if note else ""
    if not any([ctx.write(call) for call in write]):
        same = f"{daemon.config_path} already up to date (budget {config.budget_text}){also}"
        return changed(same) if note and note.startswith("removed") else ok(same)
    return changed(
        f"wrote {daemon.config_path}: total_budget {config.budget_text}{also}",
        total_budget=config.budget,
        extra_config=daemon.extra_config,
    )


def _leftover(ctx: HostContext, call: Call) -> str | None:
    """A note on the leftover PCE temporary: a param_cache that is a link (params on another
    disk) is not removed through, the .tmp stays and the host goes on (cuzk's File::create
    truncates it when it writes the PCE again)."""
    report = Report.parse(ctx.run_call(call))
    paths = call.kwargs.get("paths")
    path = ", ".join(str(p) for p in paths) if isinstance(paths, list) else ""
    if report.outcome == "failed":
        return f"left {path} in place: {report.reason[:400]}"
    return f"removed a leftover {path}" if report.outcome == "removed" else None


KIND = Kind("config", NoParams,
            # the new config is written only once the old daemon is stopped (the guard armed):
            # a run refused or lost before the stop leaves the running release's config as it was
            KindRule("stopped", after=("stop",), changes=True, moved_after="stop"),
            place=60, decide=decide, apply=apply)
