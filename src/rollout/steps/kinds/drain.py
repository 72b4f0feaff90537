"""Drain: wait until the stopped daemon is gone and the memory that matters is back.

The host action (ops.drain) polls every 50 ms; this step gives it the
new daemon's budget in bytes, decided here from the host's facts by the one budget rule
(rollout.steps.budget, the figure the config step writes), and turns its answer into the
step's result: what drained it, or what still holds the memory. Where the rule gives no
figure (no visible cgroup limit and total_budget "cgroup": preflight refuses such a host),
the drain waits for the working set's baseline alone, and says so."""

from __future__ import annotations

from dataclasses import dataclass

from pydantic import Field

from rollout.config.steps import KindRule, ParamSeconds, StrictParams
from rollout.host.facts import HostFacts, MemoryFacts
from rollout.output.events import StepResult
from rollout.steps.base import HostContext, Kind, judged
from rollout.steps.budget import BudgetRule, decide_budget
from rollout.steps.daemon import serving
from rollout.steps.decision import Action, Call, Decision, Skip, Stopped, Target


class DrainParams(StrictParams):
    deadline: ParamSeconds | None = Field(
        default=None, gt=0, description="daemon.drain.deadline."
    )
    plateau: ParamSeconds | None = Field(default=None, gt=0, description="daemon.drain.plateau.")
    zombie_grace: ParamSeconds | None = Field(
        default=None, ge=0, description="daemon.drain.zombie_grace."
    )


@dataclass(frozen=True)
class DrainHow:
    deadline: float
    plateau: float
    zombie_grace: float
    budget: int | None  # bytes the new daemon needs under the limit (the budget rule's)
    no_budget: str | None = None  # why there is no budget figure: the baseline alone counts

    def settings(self) -> dict[str, float | int]:
        """What ops.drain waits by: the figures, and the budget where there is one."""
        budget = {} if self.budget is None else {"budget": int(self.budget)}
        return {"deadline": float(self.deadline), "plateau": float(self.plateau),
                "zombie_grace": float(self.zombie_grace), **budget}


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
    call = Call("drain", {"root": target.layout.root, "settings": how.settings()},
                how.deadline + 30, runtime=("pid", "starttime"))
    return Action(summary, params, how, calls=(call,))


def decide(facts: HostFacts, target: Target, params: DrainParams) -> Decision:
    skip = serving(facts, target)
    if skip:
        return Skip(f"{skip.reason}: it was not stopped")
    return drain_action(target, params, facts.memory)


def apply(ctx: HostContext, action: Action) -> StepResult:
    """The drain call, for the daemon the stop of this plan stopped (the judge's rule), as
    the guard runs it."""
    stopped = ctx.state.stopped or Stopped()  # judge.stopped_daemon, read from its report
    calls = [c.plus(pid=stopped.pid, starttime=stopped.starttime) for c in action.calls]
    return judged("drain", calls, ctx.run_calls(calls), retryable=False)


def undo(target: Target, facts: HostFacts, params: DrainParams, to: str | None) -> Action:
    """A rollback's drain: this plan's drain settings, the budget from its facts."""
    return drain_action(target, params, facts.memory)


KIND = Kind("drain", DrainParams,
            # drain waits for the memory of the daemon the stop stopped (its pid from the stop)
            KindRule("stopped", needs=("stop",), changes=True), place=50,
            decide=decide, apply=apply, undo=undo,
            undo_seconds=lambda settings: float(settings.daemon.drain.deadline) + 60,
            not_redone="drain failed (deadline or plateau): restarting the previous release "
                       "without waiting again (its memory is still charged)",
            tolerated=True)
