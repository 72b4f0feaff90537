"""Drain: wait until the stopped daemon is gone and the memory that matters is back.

The host-side script (rollout.host.scripts.drain) polls every 50 ms; this step gives it the
new daemon's budget in bytes, decided here from the host's facts by the one budget rule
(rollout.steps.budget, the figure the config step writes), and turns its answer into the
step's result: what drained it, or what still holds the memory. Where the rule gives no
figure (no visible cgroup limit and total_budget "cgroup": preflight refuses such a host),
the drain waits for the working set's baseline alone, and says so."""

from __future__ import annotations

from dataclasses import dataclass

from rollout.config.steps import DrainParams
from rollout.errors import StepFailed
from rollout.host.facts import HostFacts, MemoryFacts
from rollout.host.scripts.common import drain_failure, format_size
from rollout.output.events import StepResult, ok
from rollout.steps.base import HostContext
from rollout.steps.budget import BudgetRule, decide_budget
from rollout.steps.daemon import serving
from rollout.steps.decision import Action, Decision, Skip, Stopped, Target


@dataclass(frozen=True)
class DrainHow:
    deadline: float
    plateau: float
    zombie_grace: float
    budget: int | None  # bytes the new daemon needs under the limit (the budget rule's)
    no_budget: str | None = None  # why there is no budget figure: the baseline alone counts

    def budget_args(self) -> list[object]:
        """drain.py's --budget BYTES; none without a figure."""
        return [] if self.budget is None else ["--budget", self.budget]


def drain_action(target: Target, params: DrainParams, memory: MemoryFacts) -> Action[DrainHow]:
    """The drain's settings (its params over the playbook's) and the new daemon's budget,
    decided from the host's memory facts by the budget rule."""
    d = target.settings.daemon.drain
    budget = decide_budget(memory, BudgetRule.of(target.settings))
    no_budget = budget.refusal if budget.size is None else None
    how = DrainHow(
        d.deadline if params.deadline is None else params.deadline,
        d.plateau if params.plateau is None else params.plateau,
        d.zombie_grace if params.zombie_grace is None else params.zombie_grace,
        budget.size,
        no_budget,
    )
    summary = (
        f"wait until the stopped daemon is gone and its memory is back (deadline "
        f"{how.deadline:g}s, plateau {how.plateau:g}s)"
    )
    if no_budget:
        summary += "; no budget figure: the working set's baseline alone counts"
    return Action(summary, params, how)


def decide(facts: HostFacts, target: Target, params: DrainParams) -> Decision:
    skip = serving(facts, target)
    if skip:
        return Skip(f"{skip.reason}: it was not stopped")
    return drain_action(target, params, facts.memory)


def apply(ctx: HostContext, action: Action) -> StepResult:
    how = action.detail_as(DrainHow)
    stopped = ctx.state.stopped or Stopped()
    args: list[object] = [
        "--root",
        ctx.layout.root,
        "--deadline",
        how.deadline,
        "--plateau",
        how.plateau,
        "--zombie-grace",
        how.zombie_grace,
        *how.budget_args(),
    ]
    if stopped.pid:
        args += ["--pid", stopped.pid]
        args += ["--starttime", stopped.starttime] if stopped.starttime is not None else []
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
