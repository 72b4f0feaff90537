"""Drain: wait until the stopped daemon is gone and the memory that matters is back.

The host-side script (rollout.host.scripts.drain) polls every 50 ms; this step gives it the
new daemon's budget, the same one the config step writes, and turns its answer into the
step's result: what drained it, or what still holds the memory."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from rollout.config.steps import DrainParams
from rollout.errors import StepFailed
from rollout.host.facts import HostFacts
from rollout.host.scripts.common import drain_failure, format_size
from rollout.output.events import StepResult, ok
from rollout.steps.base import HostContext
from rollout.steps.daemon import serving
from rollout.steps.decision import Action, Decision, Skip, Target
from rollout.units import parse_size


def budget_args(daemon: Any) -> list[object]:
    """--budget BYTES for a fixed total_budget, else --margin BYTES (limit minus margin)."""
    if daemon.total_budget == "cgroup":
        return ["--margin", parse_size(daemon.safety_margin)]
    return ["--budget", parse_size(daemon.total_budget)]


@dataclass(frozen=True)
class DrainHow:
    deadline: float
    plateau: float
    zombie_grace: float


def drain_action(target: Target, params: DrainParams) -> Action:
    d = target.settings.daemon.drain
    how = DrainHow(
        d.deadline if params.deadline is None else params.deadline,
        d.plateau if params.plateau is None else params.plateau,
        d.zombie_grace if params.zombie_grace is None else params.zombie_grace,
    )
    summary = (
        f"wait until the stopped daemon is gone and its memory is back (deadline "
        f"{how.deadline:g}s, plateau {how.plateau:g}s)"
    )
    return Action(summary, params, how)


def decide(facts: HostFacts, target: Target, params: DrainParams) -> Decision:
    skip = serving(facts, target)
    return Skip(f"{skip.reason}: it was not stopped") if skip else drain_action(target, params)


def apply(ctx: HostContext, action: Action) -> StepResult:
    how: DrainHow = action.detail
    stopped = ctx.state.stopped or {}
    args: list[object] = [
        "--root",
        ctx.layout.root,
        "--deadline",
        how.deadline,
        "--plateau",
        how.plateau,
        "--zombie-grace",
        how.zombie_grace,
        *budget_args(ctx.settings.daemon),
    ]
    if stopped.get("pid"):
        args += ["--pid", stopped["pid"], "--starttime", stopped["starttime"]]
    else:
        args += ["--pid", 0]  # no daemon was stopped: wait for the memory alone
    _, out = ctx.script("drain", *args, timeout=how.deadline + 30)
    if out.get("outcome") != "drained":
        raise StepFailed(drain_failure(out), retryable=False, data=out)
    note = f"; {out['zombie_note']}" if out.get("zombie_note") else ""
    waited = out["ended"] - out["started"]
    drained_by = {
        "budget": f"headroom fits the budget {format_size(out.get('budget'))}",
        "baseline": "working set back to its level before the old daemon started",
    }.get(out.get("drained_by") or "", "memory not measurable here")
    return ok(
        f"old daemon gone and {drained_by} after {waited:.1f}s (working set "
        f"{format_size(out.get('working_set'))}, page cache "
        f"{format_size(out.get('page_cache'))}){note}",
        **out,
    )
