"""The daemon's TOML, with a memory budget that fits the container's cgroup limit (the config
kind: rollout.steps.kinds.config), and the configs kept per release (switch, prune)."""

from __future__ import annotations

from dataclasses import dataclass

from rollout.errors import StepFailed
from rollout.host.facts import HostFacts
from rollout.host.reports import Report
from rollout.steps.base import HostContext
from rollout.steps.budget import BudgetRule, decide_budget
from rollout.steps.decision import Call, Target


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


def forget_call(target: Target, release_ids: list[str]) -> Call:
    """ops.remove_files: the configs kept for these releases (a link there: the link itself)."""
    path = target.settings.daemon.config_path
    return Call("remove_files", {"paths": [config_of(path, r) for r in release_ids]})


def forget_configs(ctx: HostContext, call: Call) -> None:
    """The forget_call's report read: StepFailed where they were not removed."""
    out = Report.parse(ctx.run_call(call))
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


