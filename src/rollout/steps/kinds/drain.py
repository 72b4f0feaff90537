"""Drain: wait until the stopped daemon is gone and the memory that matters is back.

The host-side script (rollout.host.scripts.drain) polls every 50 ms; this step gives it the
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

    def budget_args(self) -> list[object]:
        """drain.py's --budget BYTES; none without a figure."""
        return [] if self.budget is None else ["--budget", self.budget]

    def settings(self) -> dict[str, float | int]:
        """What ops.drain hands drain.py: the figures, and the budget where there is one."""
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
                how.deadline + 30)
    return Action(summary, params, how, calls=(call,))


def decide(facts: HostFacts, target: Target, params: DrainParams) -> Decision:
    skip = serving(facts, target)
    if skip:
        return Skip(f"{skip.reason}: it was not stopped")
    return drain_action(target, params, facts.memory)


def apply(ctx: HostContext, action: Action) -> StepResult:
    """The drain call, for the daemon the stop of this plan stopped (the judge's rule), run
    as drain.py on the host (the guard runs the same call through ops.drain)."""
    stopped = ctx.state.stopped or Stopped()  # judge.stopped_daemon, read from its report
    reports = [_drain(ctx, call, {**call.kwargs, "pid": stopped.pid,
                                  "starttime": stopped.starttime}) for call in action.calls]
    return judged("drain", action.calls, reports, retryable=False)


def _drain(ctx: HostContext, call: Call, kwargs: dict[str, object]) -> dict[str, object]:
    settings = kwargs.get("settings")
    given = settings if isinstance(settings, dict) else {}
    args: list[object] = ["--root", kwargs.get("root"), "--pid", kwargs.get("pid") or 0]
    args += ["--starttime", kwargs["starttime"]] if kwargs.get("starttime") is not None else []
    for key in ("deadline", "plateau", "zombie_grace"):
        args += [f"--{key.replace('_', '-')}", given[key]] if key in given else []
    args += ["--budget", given["budget"]] if "budget" in given else []
    _, out = ctx.script("drain", *args, timeout=call.timeout)
    return out if isinstance(out, dict) else {}


def undo(target: Target, facts: HostFacts, params: DrainParams, to: str | None) -> Action:
    """A rollback's drain: this plan's drain settings, the budget from its facts."""
    return drain_action(target, params, facts.memory)


KIND = Kind("drain", DrainParams,
            # drain waits for the memory of the daemon the stop stopped (its pid from the stop)
            KindRule("stopped", needs=("stop",), changes=True), place=50,
            decide=decide, apply=apply, undo=undo)
