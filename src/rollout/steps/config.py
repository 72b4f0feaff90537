"""Render the daemon's TOML with a memory budget that fits the container's cgroup limit."""

from __future__ import annotations

from typing import Any

from rollout.errors import StepFailed
from rollout.events import StepResult, changed, skipped
from rollout.layout import q
from rollout.steps.base import HostContext
from rollout.steps.current import current_release
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


def config_of(config_path: str, release_id: str) -> str:
    """Where the config a release last ran with is kept, for a rollback to that release."""
    return f"{config_path}.for-{release_id}"


def restore_config_of(ctx: HostContext, release_id: str) -> bool:
    """Put back the config `release_id` ran with, if kept; True when it was."""
    path = ctx.settings.daemon.config_path
    kept = q(config_of(path, release_id))
    copy = f"cp -- {kept} {q(path)}.new && mv -T -- {q(path)}.new {q(path)}"
    return ctx.sh(f"umask 077 && test -f {kept} && chmod 600 -- {kept} && {copy}").ok


def forget_configs_of(ctx: HostContext, release_ids: list[str]) -> None:
    path = ctx.settings.daemon.config_path
    kept = " ".join(q(config_of(path, rid)) for rid in release_ids)
    ctx.sh(f"rm -f -- {kept}").check()


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
    ctx.sh(f"chmod 600 -- {q(config_of(daemon.config_path, ''))}* 2>/dev/null")  # kept copies
    running = current_release(ctx)  # config runs before switch: the release in service
    keep = config_of(daemon.config_path, running) if running else None
    if not ctx.write_if_changed(daemon.config_path, text, keep):
        return skipped(f"{daemon.config_path} already up to date (budget {budget_text})")
    return changed(f"wrote {daemon.config_path}: total_budget {budget_text}", total_budget=budget,
                   extra_config=daemon.extra_config)
