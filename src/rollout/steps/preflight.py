"""Preflight: before anything on a host changes, check that the rollout can succeed there."""

from __future__ import annotations

from typing import Any

from rollout.errors import StepFailed
from rollout.events import StepResult, ok
from rollout.steps.base import HostContext
from rollout.steps.config import memory_budget
from rollout.steps.validate import ensure_input
from rollout.units import format_size, parse_size

SPACE_MARGIN = 8 * 1024**2  # room for logs and records beside the release


def _space_needed(ctx: HostContext, facts: dict[str, Any]) -> int:
    if ctx.release is None:
        return SPACE_MARGIN
    ids = {r.get("id") for r in facts.get("releases") or []}
    if ctx.release.id in ids:
        return SPACE_MARGIN
    return 2 * sum(a.size for a in ctx.release.artifacts) + SPACE_MARGIN


def _problems(ctx: HostContext, facts: dict[str, Any]) -> list[str]:
    problems = []
    root = ctx.layout.root
    if not facts.get("root_writable"):
        problems.append(f"{root} is not writable")
    free = (facts.get("disk") or {}).get("free_bytes")
    need = _space_needed(ctx, facts)
    if free is not None and free < need:
        problems.append(
            f"{root} has {format_size(free)} free, the release needs {format_size(need)}"
        )
    daemon = ctx.settings.daemon
    try:
        budget = memory_budget(facts, daemon.safety_margin)
        if daemon.total_budget != "cgroup" and parse_size(daemon.total_budget) > budget:
            problems.append(
                f"total_budget {daemon.total_budget} exceeds the cgroup limit minus "
                f"the safety margin ({format_size(budget)})"
            )
    except StepFailed as e:
        problems.append(str(e))
    if not facts.get("python"):
        problems.append("python3 is missing on the host")
    return problems


def preflight(ctx: HostContext, params: dict[str, Any]) -> StepResult:
    facts = ctx.facts()
    problems = _problems(ctx, facts)
    if problems:
        raise StepFailed("; ".join(problems), retryable=False)
    staged = ensure_input(ctx)
    free = format_size((facts.get("disk") or {}).get("free_bytes"))
    return ok(f"{ctx.layout.root} writable, {free} free, budget fits; {staged}")
