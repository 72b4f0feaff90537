"""The daemon's life on a host: supervisor, stop, start, ready (drain: steps/drain.py)."""

from __future__ import annotations

import hashlib
import json
import shlex
from dataclasses import dataclass
from typing import Any, NamedTuple

from rollout.config.steps import ReadyParams, StartParams, StopParams, SuperviseParams
from rollout.errors import StepFailed
from rollout.host.facts import HostFacts, tcp_port
from rollout.host.reports import ReadyReport, Report, StartReport, StopReport, TextReport
from rollout.host.scripts import script_text
from rollout.output.events import StepResult, changed, ok, skipped
from rollout.secrets import head
from rollout.steps.base import HostContext
from rollout.steps.decision import Action, Decision, Phase, Skip, Started, Stopped, Target
from rollout.steps.identity import check_ports, ports_query
from rollout.steps.work import before_stop, with_work, work_how
from rollout.units import format_size


def supervisor_conf(target: Target, params: SuperviseParams) -> str:
    daemon = target.settings.daemon
    launcher = params.launcher  # from the playbook alone: never an inventory var
    ports = [p for p in (tcp_port(daemon.listen), tcp_port(daemon.status_listen)) if p]
    conf = {"daemon_args": f"-c {shlex.quote(daemon.config_path)}", "launcher": str(launcher),
            "ports": ports, "daemon_env": {"NO_COLOR": "1"}}  # cuzk colours its log unless NO_COLOR
    return json.dumps(conf, indent=2, sort_keys=True) + "\n"


def _sha256(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


class Supervision(NamedTuple):
    """What decide_supervise fixed for supervise: the supervisor's settings text, whether one
    runs, whether to set the hold first, and whether only its start-up registration is due."""

    conf: str
    alive: bool
    hold: bool
    register_only: bool


def decide_supervise(facts: HostFacts, target: Target, params: SuperviseParams) -> Decision:
    """Install the supervisor and its settings; (re)start it if either changed."""
    lay = target.layout
    conf = supervisor_conf(target, params)
    changed_files = facts.digest(lay.supervisor) != _sha256(script_text("supervisor")) or (
        facts.digest(lay.supervisor_conf) != _sha256(conf)
    )
    alive = facts.supervisor.alive
    onstart = str(target.host.vars.get("onstart_script") or "")
    unregistered = facts.registered is None or (onstart and onstart not in facts.registered)
    if alive and not changed_files and unregistered:
        return Action("register the running supervisor with the host's start-up mechanism",
                      params, Supervision(conf, alive, False, True))
    if alive and not changed_files:
        return Skip("supervisor running, script and settings unchanged")
    what = "restart the supervisor (script or settings changed)" if alive else "start it"
    # never start a daemon this run is about to stop: a hand-started one runs (adopt), or
    # a rollout will stop whatever a fresh supervisor would start now
    stops_later = (not alive and target.release_id is not None and not facts.daemon.running
                   and serving(facts, target) is None)
    hold = bool(facts.foreign_daemons) or stops_later
    if facts.foreign_daemons:
        what += " held: the daemon it does not own is stopped first (adopt)"
    elif hold:
        what += " held: this run starts the new release itself"
    return Action(f"install the supervisor; {what}", params, Supervision(conf, alive, hold, False))


def register(ctx: HostContext) -> str:
    """Register the supervisor with the host's start-up mechanism (ops.register: the
    on-start script the host var onstart_script names, else cron @reboot, else a systemd
    unit); how, or "none"."""
    onstart = str(ctx.host_vars.get("onstart_script") or "")
    report = Report.parse(ctx.call("register", root=ctx.layout.root, onstart=onstart))
    how = report.raw.get("how")
    if report.outcome == "refused":
        return f"none ({head(report.reason, 200)})"
    return how if isinstance(how, str) and how else "none"


def supervise(ctx: HostContext, action: Action) -> StepResult:
    lay = ctx.layout
    conf, alive, hold, register_only = action.detail_as(Supervision)
    if register_only:
        how = register(ctx)
        return changed(f"supervisor running; start-up registration: {how}")
    made = Report.parse(ctx.call("make_folder", path=lay.state_dir))
    if made.outcome not in ("made", "kept"):
        raise StepFailed(f"could not make {lay.state_dir}: {made.reason}", retryable=False)
    if hold:
        set_hold(ctx)
    ctx.write_if_changed(lay.supervisor, script_text("supervisor"))
    ctx.write_if_changed(lay.supervisor_conf, conf)
    report = Report.parse(ctx.call("run_supervisor", root=lay.root, restart=alive))
    if report.outcome not in ("started", "restarted"):  # never one others could write
        raise StepFailed(f"could not start the supervisor: {report.reason}", retryable=False)
    registered = register(ctx)
    what = "restarted (script or settings changed)" if alive else "started"
    what += f"; start-up registration: {registered}"
    return changed(f"supervisor {what}{', held (adopting)' if hold else ''}")


def daemon_log_tail(ctx: HostContext, lines: int = 20) -> str:
    """The last lines of the daemon's log (ops.log_tail: never read through a link)."""
    return TextReport.parse(ctx.call("log_tail", root=ctx.layout.root, lines=lines)).text


def set_hold(ctx: HostContext) -> None:
    ctx.call("hold", root=ctx.layout.root)


def release_hold(ctx: HostContext) -> None:
    ctx.call("release_hold", root=ctx.layout.root)


def serving(facts: HostFacts, target: Target) -> Skip | None:
    """A skip when the daemon already runs the release being rolled out (no hold set)."""
    rid = target.release_id
    if rid and facts.serves(rid, target.layout.release_dir(rid)):
        return Skip(f"daemon {facts.daemon.pid} already runs release {rid}")
    return None


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
    adopt = tuple((p.pid, p.starttime) for p in facts.foreign_daemons
                  if p.starttime is not None) if target.settings.preflight.adopt else ()
    how = StopHow(how.signal, how.grace, adopt, params.work)
    old = facts.daemon
    what = f"daemon {old.pid} ({old.state})" if old.pid else "the daemon, if any"
    if adopt:
        what += f", and adopt daemon(s) {', '.join(str(p) for p, _ in adopt)}"
    summary = f"set the hold; stop {what} with {how.signal}, SIGKILL after {how.grace:g}s"
    if params.work:
        summary = f"wait for the work in flight (work.*); {summary}"
    return Action(summary, params, how)


def decide_stop(facts: HostFacts, target: Target, params: StopParams) -> Decision:
    skip = None if params.force else serving(facts, target)
    return _and(skip, "nothing to stop") if skip else stop_action(facts, target, params)


def _data(report: dict[str, Any]) -> dict[str, Any]:
    """A host report as a step result's data (its reason is the result's own)."""
    return {k: v for k, v in report.items() if k != "reason"}


def stop(ctx: HostContext, action: Action) -> StepResult:
    how = action.detail_as(StopHow)
    listen = ctx.settings.daemon.status_listen
    url = status_url(listen) if listen else ""
    done = before_stop(ctx, work_how(ctx.target, url)) if how.work else None
    return with_work(_stop(ctx, how), done)


def _stop(ctx: HostContext, how: StopHow) -> StepResult:
    if how.adopt:
        set_hold(ctx)
        return _adopt(ctx, how)
    out = ctx.call("stop", root=ctx.layout.root, signal=how.signal, grace=float(how.grace),
                   call_timeout=float(how.grace) + 30)  # the hold first, in the same call
    report = StopReport.parse(out)
    ctx.state.stopped = Stopped.of(out)
    if report.outcome == "none":
        return skipped("hold set; no daemon pidfile, nothing to stop", **_data(out))
    if report.outcome == "untrusted":
        return skipped(f"hold set; {report.reason}", **_data(out))
    if report.outcome == "already-dead":
        return skipped(f"hold set; daemon {report.pid} already {report.state}", **_data(out))
    if report.outcome != "stopped":
        raise StepFailed(
            f"daemon {report.pid} survived {how.signal} and SIGKILL", retryable=False
        )
    how_text = f"{report.signal}, escalated to SIGKILL" if report.escalated else report.signal
    return changed(f"hold set; daemon {report.pid} stopped ({how_text})", **_data(out))


def _adopt(ctx: HostContext, how: StopHow) -> StepResult:
    """Stop daemons rollout's supervisor did not start, through the same signal, escalation
    and zombie-aware wait; the drain then waits for their memory. A respawn by their parent
    stops the run on this host: it keeps serving, and the parent is named."""
    done: list[dict[str, Any]] = []
    for pid, starttime in how.adopt:
        out = ctx.call("stop", root=ctx.layout.root, signal=how.signal, grace=float(how.grace),
                       adopt_pid=pid, adopt_starttime=starttime,
                       call_timeout=float(how.grace) + 30)
        report = StopReport.parse(out)
        if report.outcome == "respawned":
            # nothing of ours changed what serves: no rollback; the hold stays so that the
            # supervisor never starts a daemon next to the respawned one
            ctx.state.phase = Phase.UNTOUCHED
            raise StepFailed(
                f"adopted daemon {pid} was respawned by its parent pid {report.parent} "
                f"({report.parent_cmdline or '?'}): new daemon(s) "
                f"{list(report.respawned)}; the host keeps serving from them. Hand the loop's "
                "cuzk over to rollout's supervisor first (docs/adopt.md)",
                retryable=False, data={"adopted": out},
            )
        if report.outcome not in ("stopped", "already-dead"):
            raise StepFailed(f"adopted daemon {pid} survived {how.signal} and SIGKILL",
                             retryable=False, data={"adopted": out})
        done.append(out)
    ctx.state.stopped = Stopped.of(done[-1]) if done else None
    names = ", ".join(f"{o.get('pid')} ({o.get('cmdline') or '?'})" for o in done)
    return changed(f"hold set; adopted and stopped daemon(s) {names}", adopted=done)


def decide_start(facts: HostFacts, target: Target, params: StartParams) -> Decision:
    """Start the release being rolled out; a single `start` starts what current points at."""
    rid = target.release_id or facts.current_release
    if not target.pending and rid and facts.serves(rid, target.layout.release_dir(rid)):
        return Skip(f"daemon {facts.daemon.pid} already runs release {rid}")
    what = "the new build" if target.pending else (rid or "the release current points at")
    return Action(f"release the hold; the supervisor starts {what}", params)


def start(ctx: HostContext, action: Action) -> StepResult:
    """Release the hold; the supervisor (started where none runs, never one others could
    have written) runs a daemon of the release current points at (ops.start)."""
    params = action.params_as(StartParams)
    lay = ctx.layout
    out = ctx.call("start", root=lay.root, wait=float(params.wait),
                   call_timeout=params.wait + 75)
    report = StartReport.parse(out)
    if report.outcome == "no-release":
        raise StepFailed(f"{lay.current} does not point at a release", retryable=False)
    if report.outcome == "refused":
        raise StepFailed(f"could not start the supervisor: {head(report.reason, 300)}",
                         output=report.reason)
    if report.outcome not in ("started", "running"):
        tail = daemon_log_tail(ctx)
        raise StepFailed(f"supervisor did not start the daemon within {params.wait:.0f}s",
                         output=tail)
    if not report.pidline:
        raise StepFailed("the supervisor's daemon.pid named the release but came back empty")
    ctx.state.started = Started(report.pidline)
    return changed(
        f"hold released; supervisor started daemon {report.pidline.split()[0]}",
        pidfile=report.pidline,
    )


def status_url(status_listen: str) -> str:
    host, _, port = status_listen.rpartition(":")
    if host in ("0.0.0.0", "", "[::]", "::"):
        host = "127.0.0.1"
    return f"http://{host}:{port}/status"


def already_validated(facts: HostFacts, target: Target) -> Skip | None:
    """A skip when the daemon running now is the very process (pid and start time) that
    passed the validation of the release being rolled out: the evidence only that daemon
    could have produced. The plan keeps this skip only where nothing before it acts
    (engine.hostplan)."""
    rid = target.release_id
    if rid is None or target.pending:
        return None
    v = facts.validated_daemon(rid, target.layout.release_dir(rid))
    if v is None:
        return None
    return Skip(f"daemon {v.pid} (start time {v.starttime}) already passed the validation of "
                f"release {rid} ({target.layout.validated})",
                {"evidence": {"release": v.release, "pid": v.pid, "starttime": v.starttime,
                              "time": v.time}})


def decide_ready(facts: HostFacts, target: Target, params: ReadyParams) -> Decision:
    skip = already_validated(facts, target)
    if skip is not None:
        return skip
    daemon = target.settings.daemon
    seconds = daemon.ready_timeout if params.timeout is None else params.timeout
    return Action(f"wait for {status_url(daemon.status_listen)} (up to {seconds:g}s)", params)


def _grpc_url(listen: str) -> str:
    return status_url(listen).removesuffix("/status") + "/"


def wait_ready(ctx: HostContext, seconds: float, url: str) -> ReadyReport:
    """One call (ops.wait_ready): wait until the gRPC port accepts and then the status port
    answers ("died": the daemon died meanwhile; "timeout": not in time), then the ports'
    owners, polled in one host process."""
    known = ctx.state.started.pid if ctx.state.started else None
    ports, pid = ports_query(ctx)
    watch = {"watch": int(known)} if known and known.isdigit() else {
        "pidfile": ctx.layout.daemon_pid}
    out = ctx.call("wait_ready", status_url=url, seconds=seconds,
                   grpc_url=_grpc_url(ctx.settings.daemon.listen), ports=ports, pid=pid,
                   call_timeout=seconds + 10, **watch)
    return ReadyReport.parse(out)


def ready(ctx: HostContext, action: Action) -> StepResult:
    """The gRPC port is bound and the status port answers (never a log line: cuzk prints
    "ready, serving on" before it binds, and binds the status port before the gRPC one).
    Fails early if the daemon dies meanwhile."""
    params = action.params_as(ReadyParams)
    daemon = ctx.settings.daemon
    seconds = float(daemon.ready_timeout if params.timeout is None else params.timeout)
    url = status_url(daemon.status_listen)
    report = wait_ready(ctx, seconds, url)  # the ports' owners in the same call
    answer, owners = report.answer, report.owners
    if report.outcome == "died":
        tail = daemon_log_tail(ctx)
        raise StepFailed(
            f"{report.reason}; status port {url} never answered", retryable=False, output=tail
        )
    if report.outcome != "ready":
        raise StepFailed(f"status port {url} did not answer within {seconds:.0f}s")
    try:
        status = json.loads(answer)
    except ValueError as e:
        got = head(answer, 200)
        raise StepFailed(f"{url} answered with something that is not JSON: {got}") from e
    if not isinstance(status, dict):
        raise StepFailed(f"{url} answered with JSON that is not an object: {head(answer, 200)}")
    proved = check_ports(ctx, status, owners)
    return ok(f"status port answers ({_status_summary(status)}); {proved}", status=status)


def _status_summary(status: Any) -> str:
    """What cuzk's /status says (it names no version: the release is what rollout knows)."""
    if not isinstance(status, dict):
        return "not a JSON object"
    memory = _mapping(status.get("memory"))
    counters = _mapping(status.get("counters"))
    uptime = status.get("uptime_secs")
    up = f"up {uptime:.1f}s" if isinstance(uptime, int | float) else "uptime unknown"
    return (
        f"{up}, budget {format_size(_int_or_none(memory.get('total_bytes')))}, "
        f"{counters.get('total_completed', '?')} proofs completed, "
        f"{counters.get('total_failed', '?')} failed"
    )


def _mapping(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _int_or_none(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None
