"""Render the daemon's TOML with a memory budget that fits the container's cgroup limit."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

from rollout.config.steps import NoParams
from rollout.errors import StepFailed
from rollout.host.facts import HostFacts
from rollout.host.reports import Report
from rollout.output.events import StepResult, changed, ok
from rollout.steps.base import HostContext
from rollout.steps.budget import BudgetRule, decide_budget
from rollout.steps.decision import Action, Decision, Skip, Target
from rollout.steps.preflight_inputs import leftover_pce_tmp


def memory_budget(facts: HostFacts, target: Target) -> int:
    """Bytes the daemon may use, by the budget rule (rollout.steps.budget); a host the rule
    gives no figure fails the step with the rule's reason."""
    budget = decide_budget(facts.memory, BudgetRule.of(target.settings))
    if budget.size is None:
        raise StepFailed(f"cannot size the memory budget: {budget.refusal}", retryable=False)
    return budget.size


def config_of(config_path: str, release_id: str) -> str:
    """Where the config a release last ran with is kept, for a rollback to that release."""
    return f"{config_path}.for-{release_id}"


def forget_configs_of(ctx: HostContext, release_ids: list[str]) -> None:
    """Remove the configs kept for these releases (a link there: the link itself)."""
    if not release_ids:
        return
    path = ctx.settings.daemon.config_path
    out = Report.parse(ctx.call("remove_files", paths=[config_of(path, r) for r in release_ids]))
    if out.outcome not in ("removed", "none"):
        raise StepFailed(f"kept configs not removed: {out.reason}", retryable=False)


@dataclass(frozen=True)
class ConfigText:
    text: str
    budget: int
    keep_as: str | None  # the running release's copy of the config it replaces

    @property
    def budget_text(self) -> str:
        return f"{self.budget // 1024**2}MiB"


def render(facts: HostFacts, target: Target) -> ConfigText:
    daemon = target.settings.daemon
    budget = memory_budget(facts, target)
    text = target.render_template_file(
        "cuzk.toml.j2",
        daemon.config_template,
        {"total_budget": f"{budget // 1024**2}MiB", "extra_config": daemon.extra_config or {}},
    )
    running = facts.current_release  # config runs before switch: the release in service
    return ConfigText(text, budget, config_of(daemon.config_path, running) if running else None)


def _serves(facts: HostFacts, target: Target) -> bool:
    """The host already serves the release rolled out: nothing is stopped or started."""
    rid = target.release_id
    return rid is not None and facts.serves(rid, target.layout.release_dir(rid))


def decide(facts: HostFacts, target: Target, params: NoParams) -> Decision:
    path = target.settings.daemon.config_path
    config = render(facts, target)
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
