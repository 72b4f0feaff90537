"""Work in flight before a stop (issue 17, a busy prover): cordon the host (the user's own
command, e.g. `curio cordon`), then wait until the cordon can have taken effect (issue 27:
work.cordon_takes, the scheduler's poll) and no signal of the daemon shows work in flight
(issue 27: ops.work reads /status, GetStatus and the working memory; a daemon that answers
none is waited on; a job with no progress for work.stuck_after is named stuck and, with
work.on_stuck roll, not waited for), bounded by work.deadline and reporting the jobs at
each work.interval; at the deadline, `skip` the host (left untouched and uncordoned) or
`stop` anyway, naming the jobs abandoned. The host's end uncordons it (uncordon_at_end),
whatever happened; the host's guard does when the controller dies (engine.guard's recipe).

The decisions are pure (`verdict`, `cordon_holds`, `track`, `stuck_jobs`, `due`); the
host is read through ops.work, parsed in host/reports.py as hostile data."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, replace
from typing import Literal

from rollout.config.params_manifest import kind as proof_kind
from rollout.config.params_manifest import kinds as proof_kinds
from rollout.config.render import render_command
from rollout.config.work import AtDeadline, OnStuck
from rollout.errors import RolloutError, StepFailed
from rollout.host.reports import CommandReport, Job, WorkReport
from rollout.host.scripts.actions.work import BENCH_TIMEOUT
from rollout.host.scripts.judge import jobs_said
from rollout.jsontypes import JSON
from rollout.output.events import StepResult
from rollout.steps.base import HostContext
from rollout.steps.decision import Call, Phase, Target
from rollout.units import format_size

POLL = 1.0  # seconds between two looks at /status while waiting (at most work.interval)
# seconds between two looks at a daemon idle in the cordon's window; at its end the stop's
# own look (before its signal) is the last: each look costs the prover host a cuzk-bench
# run, and work.cordon_takes is 30 s by default
IDLE_POLL = 5.0
LOOK = ("status_url", "bench", "on_work", "known")  # ops.stop's look before its signal
LOOK_SECONDS = BENCH_TIMEOUT + 5  # what that look may add to the stop call's time
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
    cordon_takes: float  # work.cordon_takes: after the cordon, until it can have taken effect
    bench: tuple[str, ...] = ()  # argv that asks GetStatus (work.bench); () not asked
    stuck_after: float = 300.0  # work.stuck_after: seconds without progress
    on_stuck: OnStuck = "roll"


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
                   status_url, float(spec.cordon_takes), bench_argv(target),
                   float(spec.stuck_after), spec.on_stuck)


def bench_argv(target: Target) -> tuple[str, ...]:
    """`<current>/BENCH -a ADDR status`: the running release's own client (work.bench) asks
    the daemon's GetStatus at daemon.listen, as preload and the validation address it."""
    name = target.settings.work.bench
    if name is None:
        return ()
    listen = target.settings.daemon.listen
    address = listen if listen.startswith("unix://") else f"http://{listen}"
    return (f"{target.layout.current}/{name}", "-a", address, "status")


def work_calls(target: Target, how: WorkHow, polls: bool = True) -> tuple[Call, ...]:
    """The calls before a stop: the cordon (where set; the run's id added at run time),
    then ops.work, polled until the verdict is not `wait` (listed once: a poll repeats it).
    `polls` False: no daemon runs, so the cordon's own first look ends the wait."""
    look = {"status_url": how.status_url, "bench": list(how.bench)}
    cordon = Call("cordon", {"root": target.layout.root, "command": how.cordon,
                             "timeout": how.timeout, **look},
                  how.timeout + 30, runtime=("run_id",))
    work = Call("work", look, 30)
    if not how.cordon:
        return (work,)
    return (cordon, work) if polls else (cordon,)


def verdict(report: WorkReport, waited: float, how: WorkHow) -> Verdict:
    """What the wait does after one look at the daemon (ops.work, its stuck jobs left out
    where work.on_stuck rolls): `go` where every signal that answered says idle, or where
    no daemon runs at all (no-answer); else `wait` (busy, and unknown: a daemon that
    answers nothing is never taken for idle), and at the deadline the operator's choice
    (`skip` or `stop`)."""
    if report.outcome in ("idle", "no-answer"):
        return "go"
    return "wait" if waited < how.deadline else how.at_deadline


@dataclass(frozen=True)
class Progress:
    """A job's progress as the wait last saw it move: its steps (ops.work), and the wait's
    time at the look that first showed them."""

    steps: int
    since: float


def track(before: Mapping[str, Progress], jobs: tuple[Job, ...], waited: float
          ) -> dict[str, Progress]:
    """Each job's progress after this look (`waited`: the wait's time): kept from the
    previous look where its steps did not move, else now. A job with no steps (a GPU
    worker's or GetStatus's: no partitions to count) is not tracked."""
    out: dict[str, Progress] = {}
    for job in jobs:
        old = before.get(job.id)
        if job.steps is not None:
            out[job.id] = old if old is not None and old.steps == job.steps \
                else Progress(job.steps, waited)
    return out


def stuck_jobs(jobs: tuple[Job, ...], tracked: Mapping[str, Progress], waited: float,
               stuck_after: float) -> tuple[Job, ...]:
    """The jobs whose progress has not moved for `stuck_after` seconds of the wait."""
    return tuple(j for j in jobs if j.id in tracked
                 and waited - tracked[j.id].since >= stuck_after)


def cordon_holds(decided: Verdict, report: WorkReport, since_cordon: float | None,
                 how: WorkHow) -> Verdict:
    """An idle daemon before the cordon can have taken effect (work.cordon_takes since the
    cordon command ended; `since_cordon` None: no cordon ran) is waited on: a task the
    scheduler claims in that window reaches the daemon and is waited for like any job."""
    if decided == "go" and report.idle and since_cordon is not None \
            and since_cordon < how.cordon_takes:
        return "wait"
    return decided


def due(waited: float, reported: float | None, interval: float) -> bool:
    """Whether the wait reports the jobs in flight now (the first look, then each interval)."""
    return reported is None or waited - reported >= interval


def jobs_text(jobs: tuple[Job, ...], queue: int | None) -> str:
    """The jobs and the queue, as the judge says them on both sides (judge.jobs_said)."""
    return jobs_said([j.data() for j in jobs], queue)


def look_text(report: WorkReport) -> str:
    """One look for people: its jobs and queue, the working memory no job names, and the
    daemon's work unknown where no signal could tell."""
    if report.outcome == "unknown":
        return f"work unknown ({report.reason})"
    memory = "" if not report.working_bytes else (
        f"; {report.working_bytes / (1 << 20):.1f} MiB of working memory above the SRS and PCE")
    return jobs_text(report.jobs, report.queue_depth) + memory


def _jobs_data(jobs: tuple[Job, ...]) -> list[JSON]:
    return [j.data() for j in jobs]


def held_transient(report: WorkReport) -> str:
    """Where a look's only work is working memory of exactly one PCE extraction's reservation
    (kinds.yaml pce_transient), no job and no queue: the likely cause and its fix, said at a
    deadline. Never taken for idle: a WindowPoSt partition in synthesis reserves as much and
    no signal names it (issue 27)."""
    transients = {proof_kind(k).pce_transient for k in proof_kinds()}
    if report.jobs or report.queue_depth or report.working_bytes not in transients:
        return ""
    return (f"; the only work seen was {format_size(report.working_bytes)} of working "
            "memory with no job named, one PCE extraction's reservation: an old daemon whose "
            "budget cannot cache the PCE (preflight's warning, daemon.total_budget) holds it "
            "for life, while a WindowPoSt in synthesis reserves as much: raise "
            "daemon.total_budget to cache the PCE, and stop this daemon once no proof is due "
            "(`rollout stop --force`, or work.at_deadline: stop)")


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
    hint: str = ""  # how the next wait could end sooner (NO_CORDON, held_transient)
    cordon_takes: float | None = None  # the cordon's window (work.cordon_takes); None: no cordon
    new: tuple[Job, ...] = ()  # the jobs first seen after the cordon's own look
    stuck: tuple[Stuck, ...] = ()  # jobs found stuck (work.stuck_after), never waited for
    unnamed: bool = False  # a look showed work that no job names (working memory, a queue)
    late: tuple[Job, ...] = ()  # jobs the stop's own look found after the wait's last one

    def cordon_text(self) -> str:
        """What the cordon's window showed, where the stop goes after it ('' otherwise)."""
        if self.cordon_takes is None or self.verdict != "go" or not self.last.idle:
            return ""
        new = (f"{len(self.new)} new job(s) since, waited for: "
               + ", ".join(j.describe() for j in self.new[:10])) if self.new else "no new job since"
        return (f"cordon in effect: waited {self.waited:.1f}s "
                f"(work.cordon_takes {self.cordon_takes:g}s), {new}")

    def describe(self) -> str:
        stuck = "; " + stuck_text(self.stuck) if self.stuck else ""
        if self.late:
            stuck += ("; work arrived after the wait's last look, before the signal, "
                      "waited for: " + ", ".join(j.describe() for j in self.late[:10]))
        if self.verdict == "stop" and self.last.outcome == "unknown":
            return (f"deadline {self.waited:.0f}s passed with the daemon's work unknown "
                    f"({self.last.reason}): stopped anyway{stuck}")
        if self.verdict == "stop":
            return (f"deadline {self.waited:.0f}s passed: stopped anyway, abandoning "
                    f"{len(self.in_flight)} job(s) in flight: "
                    f"{jobs_text(self.in_flight, self.last.queue_depth)}{self.hint}{stuck}")
        return self._went() + stuck

    def _went(self) -> str:
        cordon = self.cordon_text()
        if not self.waited_on and self.unnamed:
            return (f"waited {self.waited:.1f}s for work in flight that no job names (working "
                    "memory above the SRS and PCE, or a queue)")
        if not self.waited_on:
            return cordon or "no job in flight"
        jobs = (f"waited {self.waited:.1f}s for {len(self.waited_on)} job(s) to end: "
                + ", ".join(j.describe() for j in self.waited_on[:10]))
        return f"{cordon}; {jobs}" if cordon else jobs

    def data(self) -> dict[str, JSON]:
        cordon: dict[str, JSON] = {} if self.cordon_takes is None else {"cordon": {
            "takes": self.cordon_takes, "new_since": _jobs_data(self.new)}}
        return {"waited": round(self.waited, 3), "waited_on": _jobs_data(self.waited_on),
                "abandoned": _jobs_data(self.in_flight) if self.verdict == "stop" else [],
                "stuck": [s.data() for s in self.stuck], **cordon,
                **({"late": _jobs_data(self.late)} if self.late else {})}


@dataclass(frozen=True)
class Stuck:
    """A job found stuck: no progress for `still` seconds of the wait (work.stuck_after)."""

    job: Job
    still: float

    def describe(self) -> str:
        age = "age unknown" if self.job.age is None else f"age {self.job.age:.0f}s"
        return (f"{self.job.kind} {self.job.id} ({age}, no progress for "
                f"{self.still:.0f}s)")

    def data(self) -> dict[str, JSON]:
        return {**self.job.data(), "no_progress_for": round(self.still, 3)}


def stuck_text(stuck: tuple[Stuck, ...]) -> str:
    return (f"{len(stuck)} job(s) stuck, not waited for: "
            + ", ".join(s.describe() for s in stuck[:10]))


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
                  first: WorkReport | None = None,
                  cordoned_at: float | None = None,
                  stuck_before: tuple[Stuck, ...] = ()) -> WorkWait:
    """Poll ops.work until the verdict is not `wait`; report the jobs at each interval.
    `first`: the first look, where the cordon's call took it; `cordoned_at`: when the
    cordon's report came back (on `clock`; None: no cordon ran), the start of its window
    (cordon_holds); `stuck_before`: jobs an earlier wait found stuck, still not waited for.
    An idle daemon is looked at every IDLE_POLL in that window and not at its end: the
    stop's look before its signal is that look (wait_again where it finds work). The
    wait's time does not count against the stop step's own timeout (work.deadline bounds
    it)."""
    start, reported = clock(), None
    step_deadline = ctx.deadline
    seen: dict[str, Job] = {}
    tracked: dict[str, Progress] = {}  # each job's progress at the previous look (track)
    stuck: dict[str, Stuck] = {s.job.id: s for s in stuck_before}
    unnamed = False
    at_cordon: tuple[Job, ...] | None = None  # the jobs of the first look: any other is new
    poll = work_calls(ctx.target, how)[-1]
    while True:
        report = first or WorkReport.parse(ctx.run_call(poll))
        first = None
        now = clock()
        waited = now - start
        if step_deadline is not None:
            ctx.deadline = step_deadline + waited
        _seen_with(seen, report.jobs)
        at_cordon = report.jobs if at_cordon is None else at_cordon
        tracked = track(tracked, report.jobs, waited)
        found = {j.id for j in stuck_jobs(report.jobs, tracked, waited, how.stuck_after)}
        now_stuck = tuple(j for j in report.jobs
                          if j.id in found or _named((s.job for s in stuck.values()), j))
        _name_stuck(ctx, how, stuck, now_stuck, tracked, waited)
        if now_stuck and how.on_stuck == "roll":
            report = report.without(now_stuck)  # its daemon cannot finish it: not in flight
        since = None if cordoned_at is None else now - cordoned_at
        decided = cordon_holds(verdict(report, waited, how), report, since, how)
        if now_stuck and how.on_stuck == "skip":
            decided = "skip"
        unnamed = unnamed or (report.outcome == "busy" and not report.jobs)
        if decided == "wait" and not report.idle and due(waited, reported, how.interval):
            reported = waited
            _emit(ctx, f"waiting for work in flight ({waited:.0f}s of {how.deadline:g}s): "
                  f"{look_text(report)}",
                  jobs=_jobs_data(report.jobs), queue_depth=report.queue_depth,
                  working_bytes=report.working_bytes, signals=dict(report.signals or {}),
                  waited=round(waited, 3), deadline=how.deadline)
        if decided != "wait":
            hint = "" if decided == "go" else held_transient(report) + (
                "" if how.cordon else NO_CORDON)
            stuck_jobs_now = [s.job for s in stuck.values()]
            ended = tuple(j for j in seen.values() if not _named(stuck_jobs_now, j))
            new = tuple(j for j in ended if not _named(at_cordon, j))
            done = WorkWait(decided, waited, ended, report.jobs, report, hint,
                            None if cordoned_at is None else how.cordon_takes, new,
                            tuple(stuck.values()), unnamed)
            if seen or unnamed or decided != "go" or done.cordon_text():
                _emit(ctx, done.describe(), verdict=decided, **done.data())
            return done
        pause = min(POLL, how.interval)
        if report.idle and since is not None:  # idle in the cordon's window
            left = how.cordon_takes - since
            pause = max(0.05, min(IDLE_POLL, left))
            if left <= IDLE_POLL:  # its end: the stop's own look, right before its signal
                first = report    # (ops.stop, by the same rule), is the look there
        sleep(pause)


def _named(jobs: Iterable[Job], job: Job) -> bool:
    """`job` is one of `jobs`, under either of its names (Job.same)."""
    return any(job.same(j) for j in jobs)


def _seen_with(seen: dict[str, Job], jobs: tuple[Job, ...]) -> None:
    """Each job of a look into `seen`, one entry per job (Job.same: /status's id and the
    first 8 characters cuzk-bench prints of it are one job), in the order first seen; the
    whole id wins."""
    for job in jobs:
        old = next((i for i, j in seen.items() if j.same(job)), job.id)
        if len(old) > len(job.id):
            continue
        if old != job.id:
            del seen[old]
        seen[job.id] = job


def _name_stuck(ctx: HostContext, how: WorkHow, named: dict[str, Stuck],
                now_stuck: tuple[Job, ...], tracked: Mapping[str, Progress],
                waited: float) -> None:
    """A `work` event for each job found stuck at this look, once; `named` keeps them."""
    for job in now_stuck:
        if _named((s.job for s in named.values()), job):
            continue
        named[job.id] = Stuck(job, waited - tracked[job.id].since)
        _emit(ctx, f"job stuck: {named[job.id].describe()} (work.stuck_after "
              f"{how.stuck_after:g}s): not waited for (work.on_stuck: {how.on_stuck})",
              stuck=[named[job.id].data()], on_stuck=how.on_stuck)


def busy_skip(ctx: HostContext, done: WorkWait) -> StepFailed:
    """The host skipped at the deadline, or for a stuck job (work.on_stuck: skip): left
    untouched (and uncordoned at its end)."""
    ctx.state.phase = Phase.UNTOUCHED
    stuck = [s.data() for s in done.stuck]
    if done.stuck and done.verdict == "skip" and ctx.settings.work.on_stuck == "skip":
        reason = (f"busy: {stuck_text(done.stuck)}; its daemon cannot finish it: host left "
                  "untouched, not stopped (work.on_stuck: skip)")
        return StepFailed(reason, retryable=False, data={"busy": True, "stuck": stuck,
                                                         "jobs": _jobs_data(done.in_flight)})
    reason = (f"busy: {len(done.in_flight)} job(s) still in flight after the deadline "
              f"{done.waited:.0f}s ({jobs_text(done.in_flight, done.last.queue_depth)}): "
              f"host left untouched, not stopped (work.at_deadline: skip){done.hint}")
    return StepFailed(reason, retryable=False,
                      data={"busy": True, "jobs": _jobs_data(done.in_flight), "stuck": stuck})


def before_stop(ctx: HostContext, how: WorkHow,
                clock: Callable[[], float] = time.monotonic,
                sleep: Callable[[float], None] = time.sleep) -> WorkWait:
    """Cordon, then wait for the work in flight (timed by `clock`, `sleep`); StepFailed
    (busy) when the host is skipped."""
    first = cordon(ctx, how)
    # the window starts once the cordon's report is back, on the controller's clock: the
    # command had ended on the host before, and no host clock is compared with ours
    cordoned_at = clock() if how.cordon else None
    done = wait_for_work(ctx, how, clock, sleep, first, cordoned_at)
    if done.verdict == "skip":
        raise busy_skip(ctx, done)
    return done


def wait_again(ctx: HostContext, how: WorkHow, done: WorkWait, late: WorkReport,
               clock: Callable[[], float] = time.monotonic,
               sleep: Callable[[float], None] = time.sleep) -> WorkWait:
    """The wait again, after the stop's own look (`late`) found work that arrived since the
    wait's last look: from that look, for what is left of work.deadline, the stuck jobs
    still let go; the two waits as one. StepFailed (busy) when the host is skipped."""
    _emit(ctx, "work arrived after the wait's last look, before the signal: nothing "
          f"stopped, waiting again: {look_text(late)}", jobs=_jobs_data(late.jobs),
          queue_depth=late.queue_depth, waited=round(done.waited, 3))
    rest = replace(how, deadline=max(0.0, how.deadline - done.waited))
    more = wait_for_work(ctx, rest, clock, sleep, first=late, stuck_before=done.stuck)
    before = {j.id for j in done.waited_on}
    waited_on = done.waited_on + tuple(j for j in more.waited_on if j.id not in before)
    arrived = tuple(j for j in late.jobs if j.id not in before)
    both = replace(more, waited=done.waited + more.waited, waited_on=waited_on,
                   cordon_takes=done.cordon_takes, new=done.new + arrived,
                   unnamed=done.unnamed or more.unnamed, late=done.late + arrived)
    if both.verdict == "skip":
        raise busy_skip(ctx, both)
    return both


def with_work(result: StepResult, done: WorkWait | None) -> StepResult:
    """The stop's result, with what the wait did (the jobs waited on, or abandoned)."""
    if done is None or (not done.waited_on and done.verdict == "go" and not done.stuck
                        and not done.unnamed and not done.late
                        and done.last.outcome != "unknown" and not done.cordon_text()):
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
