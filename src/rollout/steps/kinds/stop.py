"""stop: set the hold, wait for the work in flight, stop the daemon (and adopt)."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, replace

from pydantic import Field

from rollout import failpoints
from rollout.config.steps import KindRule, ParamSeconds, StrictParams
from rollout.errors import StepFailed
from rollout.host.facts import HostFacts
from rollout.host.reports import WorkReport
from rollout.jsontypes import JSON, JSONObject
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
from rollout.steps.work import (
    LOOK,
    LOOK_SECONDS,
    WorkWait,
    before_stop,
    look_text,
    wait_again,
    with_work,
    work_calls,
    work_how,
)


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
        "section); false: stop at once (`rollout stop --force`; a rollback's stop), naming "
        "the jobs in flight it abandons (one look right before the signal).",
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
    """The stop's action. ops.stop looks at the work once right before its signal: after
    the wait (params.work), work that arrived since is not killed and the wait goes on;
    a stop at once (a rollback, --force) names the jobs it abandons."""
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
    else:
        summary = f"{summary}, at once, naming the work in flight it abandons"
    unnamed = "; ".join(cannot_adopt(p) for p in adopting if p.starttime is None)
    if unnamed:  # refused before anything is stopped, as preflight refuses it
        return Action(summary, params, how, fails=unnamed)
    work = work_how(target, status_url(daemon.status_listen) if daemon.status_listen else "")
    before = work_calls(target, work, polls=old.running) if params.work else ()
    look = {"status_url": work.status_url, "bench": list(work.bench),
            "on_work": "wait" if params.work else "abandon"}
    return Action(summary, params, how, calls=before + stop_calls(target, how, look))


def stop_calls(target: Target, how: StopHow, look: JSONObject | None = None
               ) -> tuple[Call, ...]:
    """ops.stop (the hold first, in the same call): the daemon daemon.pid names, or each
    daemon to adopt, by pid and start time; the first call takes `look` (its one look at the
    work right before the signal: status_url, bench, on_work), where on_work is set."""
    base = {"root": target.layout.root, "signal": how.signal, "grace": float(how.grace)}
    first = dict(look) if look and look.get("on_work") else {}
    timeout = float(how.grace) + 30 + (LOOK_SECONDS if first else 0)
    runtime = ("known",) if first.get("on_work") == "wait" else ()
    if how.adopt:
        return tuple(Call("stop", {**base, **(first if i == 0 else {}), "adopt_pid": pid,
                                   "adopt_starttime": start},
                          timeout, runtime if i == 0 else ())
                     for i, (pid, start) in enumerate(how.adopt))
    return (Call("stop", {**base, **first}, timeout, runtime),)


def decide(facts: HostFacts, target: Target, params: StopParams) -> Decision:
    skip = None if params.force else serving(facts, target)
    return _and(skip, "nothing to stop") if skip else stop_action(facts, target, params)


def apply(ctx: HostContext, action: Action,
          clock: Callable[[], float] = time.monotonic,
          sleep: Callable[[float], None] = time.sleep) -> StepResult:
    """The wait (where the action waits), then the stop calls. A stop that found work
    arrived since the wait's last look signalled nothing: the wait goes on (work.deadline
    bounds the whole), then the stop again."""
    calls = [c for c in action.calls if c.name == "stop"]  # the work calls: the wait's
    if not action.detail_as(StopHow).work:
        stopped = _stop(ctx, calls)
        if isinstance(stopped, WorkReport):  # a reply only a stop after its wait may get
            raise StepFailed("the host answered a stop at once as busy, nothing stopped: "
                             f"{look_text(stopped)}", retryable=False,
                             data={"work": stopped.raw})
        return stopped
    listen = ctx.settings.daemon.status_listen
    how = work_how(ctx.target, status_url(listen) if listen else "")
    done = before_stop(ctx, how, clock, sleep)
    while True:
        _park(ctx)
        stopped = _stop(ctx, signal_calls(calls, done))
        if isinstance(stopped, StepResult):
            return with_work(stopped, done)
        done = wait_again(ctx, how, done, stopped, clock, sleep)


def signal_calls(calls: list[Call], done: WorkWait) -> list[Call]:
    """The stop calls as the wait ended: after `go` the first looks once more before its
    signal, the stuck jobs the wait let go known; after `stop` (the deadline passed, stopped
    anyway) none looks."""
    if done.verdict == "go":
        known: JSON = [s.job.id for s in done.stuck]
        return [c.plus(known=known) if c.kwargs.get("on_work") else c for c in calls]
    return [replace(c, kwargs={k: v for k, v in c.kwargs.items() if k not in LOOK},
                    runtime=()) for c in calls]


def _park(ctx: HostContext) -> None:
    """The failpoint park-before-signal@HOST: the wait ended, the stop call not yet made."""
    def parked(name: str, go: str) -> None:
        if ctx.emit is not None:
            ctx.emit("parked", reason=f"failpoint {name}: parked until {go} exists",
                     data={"failpoint": name, "go": go})

    failpoints.park("park-before-signal", parked, ctx.name)


def _stop(ctx: HostContext, calls: list[Call]) -> StepResult | WorkReport:
    """The stop calls, one at a time: an adopted daemon that was not stopped (or was
    respawned by its parent) ends the step before the next. A respawn changed nothing of
    ours that serves: no rollback, and the hold stays so that the supervisor never starts a
    daemon next to the respawned one. The first call's look, where it found work arrived
    after the wait (ops.stop "busy": nothing signalled, no hold set)."""
    reports = []
    for call in calls:
        reports.append(ctx.run_call(call))
        if reports[-1].get("outcome") == "busy" and isinstance(reports[-1].get("work"), dict):
            return WorkReport.parse(reports[-1]["work"])
        if reports[-1].get("outcome") not in ("stopped", "already-dead"):
            break
    ctx.state.stopped = Stopped.of(reports[-1]) if reports else None
    if any(r.get("outcome") == "respawned" for r in reports):
        ctx.state.phase = Phase.UNTOUCHED
    return judged("stop", calls[:len(reports)], reports, retryable=False)


def undo(target: Target, facts: HostFacts, params: StopParams, to: str | None) -> Action:
    """A rollback's stop: forced and at once, with one look at the work in flight right
    before the signal that names what it abandons (its facts are not read again)."""
    return stop_action(HostFacts(), target, StopParams(force=True, work=False))


KIND = Kind("stop", StopParams, KindRule("stopped", enters="stopped", changes=True), place=40,
            decide=decide, apply=apply, undo=undo, without_release=True)
