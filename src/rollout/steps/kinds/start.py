"""start: release the hold; the supervisor starts the release current points at."""

from __future__ import annotations

from pydantic import Field

from rollout.config.steps import KindRule, ParamSeconds, StrictParams
from rollout.host.facts import HostFacts
from rollout.output.events import StepResult
from rollout.steps.base import HostContext, Kind, judged
from rollout.steps.daemon import daemon_log_tail
from rollout.steps.decision import (
    Action,
    Call,
    Decision,
    Skip,
    Started,
    Target,
)


class StartParams(StrictParams):
    wait: ParamSeconds = Field(
        default=30, gt=0, description="Seconds for the supervisor to start the daemon."
    )


def decide(facts: HostFacts, target: Target, params: StartParams) -> Decision:
    """Start the release being rolled out; a single `start` starts what current points at."""
    rid = target.release_id or facts.current_release
    if not target.pending and rid and facts.serves(rid, target.layout.release_dir(rid)):
        return Skip(f"daemon {facts.daemon.pid} already runs release {rid}")
    what = "the new build" if target.pending else (rid or "the release current points at")
    return Action(f"release the hold; the supervisor starts {what}", params,
                  calls=start_calls(target, params))


def start_calls(target: Target, params: StartParams) -> tuple[Call, ...]:
    """ops.start: release the hold; the supervisor runs a daemon of what current points at."""
    return (Call("start", {"root": target.layout.root, "wait": float(params.wait)},
                 params.wait + 75),)


def apply(ctx: HostContext, action: Action) -> StepResult:
    """Release the hold; the supervisor (started where none runs, never one others could
    have written) runs a daemon of the release current points at (ops.start)."""
    reports = ctx.run_calls(action.calls)
    outcome = reports[-1].get("outcome") if reports else None
    output = "" if outcome in ("started", "running", "no-release") else (
        str(reports[-1].get("reason") or "") if outcome == "refused" else daemon_log_tail(ctx))
    result = judged("start", action.calls, reports, retryable=outcome != "no-release",
                    output=output)
    ctx.state.started = Started(str(result.data["pidfile"]))
    return result


def undo(target: Target, facts: HostFacts, params: StartParams, to: str | None) -> Action:
    """A rollback's start, with the playbook's settings."""
    return Action("rollback start", StartParams(), calls=start_calls(target, StartParams()))


KIND = Kind("start", StartParams, KindRule("started", enters="started", changes=True), place=80,
            decide=decide, apply=apply, undo=undo)
