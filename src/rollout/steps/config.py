"""Render the daemon's TOML with a memory budget that fits the container's cgroup limit."""

from __future__ import annotations

from typing import Any

from rollout.errors import StepFailed
from rollout.events import StepResult, changed, skipped
from rollout.layout import q
from rollout.steps.base import HostContext
from rollout.units import format_size, parse_size


def memory_budget(facts: dict[str, Any], safety_margin: str) -> int:
    """Bytes the daemon may use: the cgroup limit (else MemTotal) minus the margin."""
    limit = ((facts.get("cgroup") or {}).get("memory") or {}).get("limit")
    if not limit:
        limit = (facts.get("meminfo") or {}).get("total")
    if not limit:
        raise StepFailed(
            "cannot size the memory budget: no cgroup limit and no MemTotal", retryable=False
        )
    budget = int(limit) - parse_size(safety_margin)
    if budget <= 0:
        raise StepFailed(
            f"safety margin {safety_margin} leaves no memory under the limit "
            f"{format_size(int(limit))}",
            retryable=False,
        )
    return budget


def previous_config(config_path: str) -> str:
    """Where the config step keeps the config it replaced, for a rollback to restore."""
    return f"{config_path}.rollback"


def restore_previous_config(ctx: HostContext) -> bool:
    """Put back the config the previous release ran with; True when there was one."""
    path = ctx.settings.daemon.config_path
    kept = previous_config(path)
    return ctx.sh(f"test -f {q(kept)} && mv -T -- {q(kept)} {q(path)}").ok


def drop_previous_config(ctx: HostContext) -> None:
    ctx.sh(f"rm -f -- {q(previous_config(ctx.settings.daemon.config_path))}").check()


def config(ctx: HostContext, params: dict[str, Any]) -> StepResult:
    daemon = ctx.settings.daemon
    if daemon.total_budget == "cgroup":
        budget = memory_budget(ctx.facts(), daemon.safety_margin)
    else:
        budget = parse_size(daemon.total_budget)
    budget_text = f"{budget // 1024**2}MiB"
    text = ctx.render_template_file(
        "cuzk.toml.j2",
        daemon.config_template,
        {
            "total_budget": budget_text,
            "extra_config": daemon.extra_config or {},
        },
    )
    directory = daemon.config_path.rsplit("/", 1)[0]
    ctx.sh(f"mkdir -p -- {q(directory)} {q(daemon.param_cache)}").check()
    if not ctx.write_if_changed(daemon.config_path, text, previous_config(daemon.config_path)):
        return skipped(f"{daemon.config_path} already up to date (budget {budget_text})")
    return changed(f"wrote {daemon.config_path}: total_budget {budget_text}", total_budget=budget,
                   extra_config=daemon.extra_config)
