"""stop: set the hold, wait for the work in flight, stop the daemon (and adopt)."""

from __future__ import annotations

from dataclasses import dataclass

from pydantic import Field

from rollout.config.steps import KindRule, ParamSeconds, StrictParams
from rollout.host.facts import HostFacts
from rollout.output.events import StepResult
from rollout.steps.base import HostContext, Kind, judged
from rollout.steps.daemon import cannot_adopt, serving, status_url
from rollout.steps.decision import (
    Action,
    Call,
    Decision,
    Phase,
    Skip,
    Stopped,
    Target,
)
from rollout.steps.work import before_stop, with_work, work_calls, work_how


class StopParams(StrictParams):
    signal: str | None = Field(
        default=None, description="Signal to stop with (daemon.stop_signal)."
    )
    grace: ParamSeconds | None = Field(
        default=None, ge=0, description="Seconds before SIGKILL (daemon.stop_grace)."
    )
    force: bool = Field(
        default=False, description="Stop even when the daemon already runs the release."
    )
    work: bool = Field(
        default=True,
        description="Cordon and wait for the work in flight before the stop (the `work` "
        "section); false: stop at once (`rollout stop --force`).",
    )


def _and(skip: Skip, more: str) -> Skip:
    return Skip(f"{skip.reason}: {more}", skip.data)


@dataclass(frozen=True)
class StopHow:
    signal: str
    grace: float
    adopt: tuple[tuple[int, int], ...] = ()  # (pid, start time): daemons to take over
    work: bool = True  # cordon and wait for the work in flight first (steps/work.py)


def stop_action(facts: HostFacts, target: Target, params: StopParams) -> Action:
    daemon = target.settings.daemon
    how = StopHow(params.signal or daemon.stop_signal,
                  daemon.stop_grace if params.grace is None else params.grace)
    adopting = facts.foreign_daemons if target.settings.preflight.adopt else ()
    adopt = tuple((p.pid, p.starttime) for p in adopting if p.starttime is not None)
    how = StopHow(how.signal, how.grace, adopt, params.work)
    old = facts.daemon
    what = f"daemon {old.pid} ({old.state})" if old.pid else "the daemon, if any,"
    if adopt:
        what = what.rstrip(",") + f", and adopt daemon(s) {', '.join(str(p) for p, _ in adopt)}"
    summary = f"set the hold; stop {what} with {how.signal}, SIGKILL after {how.grace:g}s"
    if params.work:
        summary = f"wait for the work in flight (work.*); {summary}"
    unnamed = "; ".join(cannot_adopt(p) for p in adopting if p.starttime is None)
    if unnamed:  # refused before anything is stopped, as preflight refuses it
        return Action(summary, params, how, fails=unnamed)
    listen = daemon.status_listen
    before = work_calls(target, work_how(target, status_url(listen) if listen else ""),
                        polls=old.running) if params.work else ()
    return Action(summary, params, how, calls=before + stop_calls(target, how))


def stop_calls(target: Target, how: StopHow) -> tuple[Call, ...]:
    """ops.stop (the hold first, in the same call): the daemon daemon.pid names, or each
    daemon to adopt, by pid and start time."""
    base = {"root": target.layout.root, "signal": how.signal, "grace": float(how.grace)}
    timeout = float(how.grace) + 30
    if how.adopt:
        return tuple(Call("stop", {**base, "adopt_pid": pid, "adopt_starttime": start}, timeout)
                     for pid, start in how.adopt)
    return (Call("stop", base, timeout),)


def decide(facts: HostFacts, target: Target, params: StopParams) -> Decision:
    skip = None if params.force else serving(facts, target)
    return _and(skip, "nothing to stop") if skip else stop_action(facts, target, params)


def apply(ctx: HostContext, action: Action) -> StepResult:
    how = action.detail_as(StopHow)
    listen = ctx.settings.daemon.status_listen
    url = status_url(listen) if listen else ""
    done = before_stop(ctx, work_how(ctx.target, url)) if how.work else None
    return with_work(_stop(ctx, action), done)


def _stop(ctx: HostContext, action: Action) -> StepResult:
    """The action's stop calls, one at a time: an adopted daemon that was not stopped (or
    was respawned by its parent) ends the step before the next. A respawn changed nothing
    of ours that serves: no rollback, and the hold stays so that the supervisor never
    starts a daemon next to the respawned one."""
    reports = []
    calls = [c for c in action.calls if c.name == "stop"]  # the work calls: before_stop's
    for call in calls:
        reports.append(ctx.run_call(call))
        if reports[-1].get("outcome") not in ("stopped", "already-dead"):
            break
    ctx.state.stopped = Stopped.of(reports[-1]) if reports else None
    if any(r.get("outcome") == "respawned" for r in reports):
        ctx.state.phase = Phase.UNTOUCHED
    return judged("stop", calls[:len(reports)], reports, retryable=False)


def undo(target: Target, facts: HostFacts, params: StopParams, to: str | None) -> Action:
    """A rollback's stop: forced, without waiting for work (its facts are not read again)."""
    return stop_action(HostFacts(), target, StopParams(force=True, work=False))


KIND = Kind("stop", StopParams, KindRule("stopped", enters="stopped", changes=True), place=40,
            decide=decide, apply=apply, undo=undo, without_release=True)
