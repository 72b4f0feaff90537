"""Render the daemon's TOML with a memory budget that fits the container's cgroup limit."""

from __future__ import annotations

from typing import Any

from rollout.errors import StepFailed
from rollout.events import StepResult, changed, skipped
from rollout.layout import q
from rollout.steps.base import HostContext
from rollout.steps.daemon import _write_if_changed
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
    if not _write_if_changed(ctx, daemon.config_path, text):
        return skipped(f"{daemon.config_path} already up to date (budget {budget_text})")
    return changed(f"wrote {daemon.config_path}: total_budget {budget_text}", total_budget=budget)
