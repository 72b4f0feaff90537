"""Work in flight before a stop (issue 17, a busy prover): cordon the host (the user's own
command, e.g. `curio cordon`), then wait until the daemon's /status shows no job in flight
and an empty queue, bounded by work.deadline and reporting the jobs at each work.interval;
at the deadline, `skip` the host (left untouched and uncordoned) or `stop` anyway, naming
the jobs abandoned. The host's end uncordons it (uncordon_at_end), whatever happened; the
host's guard does when the controller dies (engine.guard's recipe).

The decisions are pure (`verdict`, `due`); the host is read through ops.work, parsed in
host/reports.py as hostile data."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Literal

from rollout.config.render import render_command
from rollout.config.work import AtDeadline
from rollout.errors import RolloutError, StepFailed
from rollout.host.reports import CommandReport, Job, WorkReport
from rollout.jsontypes import JSON
from rollout.output.events import StepResult
from rollout.steps.base import HostContext
from rollout.steps.decision import Call, Phase, Target

POLL = 1.0  # seconds between two looks at /status while waiting (at most work.interval)
Verdict = Literal["go", "wait", "skip", "stop"]


@dataclass(frozen=True)
class WorkHow:
    """The work section for one host: its commands rendered (quoted as validate.command)."""

    cordon: str
    uncordon: str
    deadline: float
    interval: float
    at_deadline: AtDeadline
    timeout: float
    status_url: str
    settle: float  # work.settle: idle seen twice this far apart after the cordon


def work_how(target: Target, status_url: str) -> WorkHow:
    spec = target.settings.work
    context = target.template_context()

    def rendered(key: str) -> str:
        template = getattr(spec, key)
        if template is None:
            return ""
        return render_command(template, {}, context, target.settings.location("work", key))

    return WorkHow(rendered("cordon"), rendered("uncordon"), float(spec.deadline),
                   float(spec.interval), spec.at_deadline, float(spec.command_timeout),
                   status_url, float(spec.settle))


def work_calls(target: Target, how: WorkHow) -> tuple[Call, ...]:
    """The calls before a stop: the cordon (where set; the run's id added at run time),
    then ops.work, polled until the verdict is not `wait` (listed once: a poll repeats it)."""
    cordon = Call("cordon", {"root": target.layout.root, "command": how.cordon,
                             "timeout": how.timeout, "status_url": how.status_url},
                  how.timeout + 30, runtime=("run_id",))
    work = Call("work", {"status_url": how.status_url}, 30)
    return (cordon, work) if how.cordon else (work,)


def verdict(report: WorkReport, waited: float, how: WorkHow) -> Verdict:
    """What the wait does after one look at /status: `go` (nothing in flight or queued, no
    daemon answering, or a /status not of cuzk's shape: said so in the stop's result),
    `wait`, or at the deadline the operator's choice (`skip` or `stop`)."""
    if report.idle or report.outcome not in ("busy",):
        return "go"
    return "wait" if waited < how.deadline else how.at_deadline


def due(waited: float, reported: float | None, interval: float) -> bool:
    """Whether the wait reports the jobs in flight now (the first look, then each interval)."""
    return reported is None or waited - reported >= interval


def jobs_text(jobs: tuple[Job, ...], queue: int | None) -> str:
    named = ", ".join(j.describe() for j in jobs[:10]) or "no job"
    more = f" and {len(jobs) - 10} more" if len(jobs) > 10 else ""
    return f"{named}{more}; queue {'unknown' if queue is None else queue}"


def _jobs_data(jobs: tuple[Job, ...]) -> list[JSON]:
    return [j.data() for j in jobs]


NO_CORDON = ("; no work.cordon is set, so new work kept arriving: a cordon (e.g. `curio "
             "cordon`) stops new work before the wait and lets the work in flight drain "
             "(docs/options.md, work)")


@dataclass(frozen=True)
class WorkWait:
    """How the wait before a stop ended: go, skip or stop; the jobs it waited on, and those
    still in flight when it ended (abandoned by a stop)."""

    verdict: Verdict
    waited: float
    waited_on: tuple[Job, ...]
    in_flight: tuple[Job, ...]
    last: WorkReport
    hint: str = ""  # how the next wait could end sooner (NO_CORDON)

    def describe(self) -> str:
        if self.verdict == "stop":
            return (f"deadline {self.waited:.0f}s passed: stopped anyway, abandoning "
                    f"{len(self.in_flight)} job(s) in flight: "
                    f"{jobs_text(self.in_flight, self.last.queue_depth)}{self.hint}")
        if self.last.outcome == "unknown":
            return f"work in flight unknown ({self.last.reason}): stopped without waiting"
        if not self.waited_on:
            return "no job in flight"
        return (f"waited {self.waited:.1f}s for {len(self.waited_on)} job(s) to end: "
                + ", ".join(j.describe() for j in self.waited_on[:10]))

    def data(self) -> dict[str, JSON]:
        return {"waited": round(self.waited, 3), "waited_on": _jobs_data(self.waited_on),
                "abandoned": _jobs_data(self.in_flight) if self.verdict == "stop" else []}


def _emit(ctx: HostContext, reason: str, step: str | None = "stop", **data: JSON) -> None:
    if ctx.emit is not None:
        ctx.emit("work", step=step, reason=reason, data=data)


def cordon(ctx: HostContext, how: WorkHow) -> WorkReport | None:
    """Run the cordon command (if set), recorded first as "cordoned by run X" on the host;
    the wait's first look at /status, taken by the host right after the command in the same
    round trip (None where it gave none). A cordon that failed leaves the host untouched:
    the host's end uncordons it."""
    if not how.cordon:
        return None
    ctx.state.cordoned = True  # before the call: whatever happens next, the end uncordons
    try:
        call = work_calls(ctx.target, how)[0]
        report = CommandReport.parse(ctx.run_call(call.plus(run_id=ctx.run_id)))
    except RolloutError as e:
        report = CommandReport("failed", f"{type(e).__name__}: {e}", None, "")
    if report.outcome != "cordoned":
        ctx.state.phase = Phase.UNTOUCHED  # nothing that serves changed: no rollback
        raise StepFailed(f"cordon failed ({report.reason}): nothing was stopped",
                         retryable=False, output=report.output)
    _emit(ctx, f"cordoned ({how.cordon})", output=report.output[-500:])
    first = report.raw.get("work")
    return WorkReport.parse(first) if isinstance(first, dict) and how.status_url else None


def wait_for_work(ctx: HostContext, how: WorkHow,
                  clock: Callable[[], float] = time.monotonic,
                  sleep: Callable[[float], None] = time.sleep,
                  first: WorkReport | None = None) -> WorkWait:
    """Poll ops.work until the verdict is not `wait`; report the jobs at each interval.
    `first`: the first look, where the cordon's call took it. The wait's time does not
    count against the stop step's own timeout (work.deadline bounds it)."""
    start, reported, idle_at = clock(), None, None
    step_deadline = ctx.deadline
    seen: dict[str, Job] = {}
    poll = work_calls(ctx.target, how)[-1]
    while True:
        report = first or WorkReport.parse(ctx.run_call(poll))
        first = None
        waited = clock() - start
        if step_deadline is not None:
            ctx.deadline = step_deadline + waited
        seen.update((j.id, j) for j in report.jobs)
        decided = verdict(report, waited, how)
        if decided == "go" and how.cordon and report.idle:  # confirmed once, settle later
            idle_at = waited if idle_at is None else idle_at
            decided = "go" if waited - idle_at >= how.settle else "wait"
        else:
            idle_at = None
        if decided == "wait" and not report.idle and due(waited, reported, how.interval):
            reported = waited
            _emit(ctx, f"waiting for work in flight ({waited:.0f}s of {how.deadline:g}s): "
                  f"{jobs_text(report.jobs, report.queue_depth)}",
                  jobs=_jobs_data(report.jobs), queue_depth=report.queue_depth,
                  waited=round(waited, 3), deadline=how.deadline)
        if decided != "wait":
            hint = NO_CORDON if decided != "go" and not how.cordon else ""
            done = WorkWait(decided, waited, tuple(seen.values()), report.jobs, report, hint)
            if seen or decided != "go":
                _emit(ctx, done.describe(), verdict=decided, **done.data())
            return done
        pause = min(POLL, how.interval)  # while confirming idle: the settle's own spacing
        sleep(pause if idle_at is None else min(pause, max(0.05, how.settle)))


def busy_skip(ctx: HostContext, done: WorkWait) -> StepFailed:
    """The host skipped at the deadline: left untouched (and uncordoned at its end)."""
    ctx.state.phase = Phase.UNTOUCHED
    reason = (f"busy: {len(done.in_flight)} job(s) still in flight after the deadline "
              f"{done.waited:.0f}s ({jobs_text(done.in_flight, done.last.queue_depth)}): "
              f"host left untouched, not stopped (work.at_deadline: skip){done.hint}")
    return StepFailed(reason, retryable=False,
                      data={"busy": True, "jobs": _jobs_data(done.in_flight)})


def before_stop(ctx: HostContext, how: WorkHow,
                clock: Callable[[], float] = time.monotonic,
                sleep: Callable[[float], None] = time.sleep) -> WorkWait:
    """Cordon, then wait for the work in flight (timed by `clock`, `sleep`); StepFailed
    (busy) when the host is skipped."""
    first = cordon(ctx, how)
    done = wait_for_work(ctx, how, clock, sleep, first)
    if done.verdict == "skip":
        raise busy_skip(ctx, done)
    return done


def with_work(result: StepResult, done: WorkWait | None) -> StepResult:
    """The stop's result, with what the wait did (the jobs waited on, or abandoned)."""
    if done is None or (not done.waited_on and done.verdict == "go"
                        and done.last.outcome != "unknown"):
        return result
    return replace(result, reason=f"{result.reason}; {done.describe()}",
                   data={**result.data, **done.data()})


def uncordon_at_end(ctx: HostContext) -> CommandReport | None:
    """The host's end, whatever it was (validated, rolled back, failed, skipped): undo this
    run's cordon. A failure is said (heal uncordons a host whose record stays)."""
    if not ctx.state.cordoned:
        return None
    how = work_how(ctx.target, "")
    try:
        report = CommandReport.parse(ctx.call("uncordon", root=ctx.layout.root,
                                              command=how.uncordon, timeout=how.timeout,
                                              call_timeout=how.timeout + 30))
    except RolloutError as e:
        report = CommandReport("failed", f"{type(e).__name__}: {e}", None, "")
    if report.outcome in ("uncordoned", "none"):
        ctx.state.cordoned = False
        _emit(ctx, f"uncordoned ({how.uncordon})", None, output=report.output[-500:])
    else:
        _emit(ctx, f"uncordon FAILED ({report.reason}): the host stays cordoned; "
              "`rollout heal` uncordons it", None, output=report.output[-500:])
    return report
