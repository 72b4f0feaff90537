"""The daemon's life on a host: supervisor, stop, start, ready (drain: steps/drain.py)."""

from __future__ import annotations

import hashlib
import json
import shlex
from dataclasses import dataclass
from typing import NamedTuple

from rollout.config.steps import ReadyParams, StartParams, StopParams, SuperviseParams
from rollout.errors import StepFailed
from rollout.host.facts import HostFacts, tcp_port
from rollout.host.reports import Report, TextReport
from rollout.host.scripts import script_text
from rollout.output.events import StepResult, changed, ok
from rollout.secrets import head
from rollout.steps.base import HostContext, judged
from rollout.steps.decision import Action, Call, Decision, Phase, Skip, Started, Stopped, Target
from rollout.steps.identity import check_ports, ports_query
from rollout.steps.work import before_stop, with_work, work_how


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
    return Action(summary, params, how, calls=stop_calls(target, how))


def stop_calls(target: Target, how: StopHow) -> tuple[Call, ...]:
    """ops.stop (the hold first, in the same call): the daemon daemon.pid names, or each
    daemon to adopt, by pid and start time."""
    base = {"root": target.layout.root, "signal": how.signal, "grace": float(how.grace)}
    timeout = float(how.grace) + 30
    if how.adopt:
        return tuple(Call("stop", {**base, "adopt_pid": pid, "adopt_starttime": start}, timeout)
                     for pid, start in how.adopt)
    return (Call("stop", base, timeout),)


def decide_stop(facts: HostFacts, target: Target, params: StopParams) -> Decision:
    skip = None if params.force else serving(facts, target)
    return _and(skip, "nothing to stop") if skip else stop_action(facts, target, params)


def stop(ctx: HostContext, action: Action) -> StepResult:
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
    for call in action.calls:
        reports.append(ctx.run_call(call))
        if reports[-1].get("outcome") not in ("stopped", "already-dead"):
            break
    ctx.state.stopped = Stopped.of(reports[-1]) if reports else None
    if any(r.get("outcome") == "respawned" for r in reports):
        ctx.state.phase = Phase.UNTOUCHED
    return judged("stop", action.calls[:len(reports)], reports, retryable=False)


def decide_start(facts: HostFacts, target: Target, params: StartParams) -> Decision:
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


def start(ctx: HostContext, action: Action) -> StepResult:
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
    return Action(f"wait for {status_url(daemon.status_listen)} (up to {seconds:g}s)", params,
                  calls=ready_calls(target, float(seconds)))


def ready_calls(target: Target, seconds: float) -> tuple[Call, ...]:
    """ops.wait_ready: the gRPC port accepts, then the status port answers ("died": the
    daemon daemon.pid names died meanwhile), and the daemon itself holds its ports."""
    daemon = target.settings.daemon
    grpc, status = tcp_port(daemon.listen), tcp_port(daemon.status_listen)
    kwargs = {"status_url": status_url(daemon.status_listen) if status else "",
              "seconds": seconds, "grpc_url": _grpc_url(daemon.listen) if grpc else "",
              "pidfile": target.layout.daemon_pid, "ports": [p for p in (status, grpc) if p],
              "require_owner": True}
    return (Call("wait_ready", kwargs, seconds + 10),)


def _grpc_url(listen: str) -> str:
    return status_url(listen).removesuffix("/status") + "/"


def ready(ctx: HostContext, action: Action) -> StepResult:
    """The gRPC port is bound and the status port answers (never a log line: cuzk prints
    "ready, serving on" before it binds, and binds the status port before the gRPC one),
    held by the daemon started (its pid added here, for its age). Fails early if the daemon
    dies meanwhile."""
    _, pid = ports_query(ctx)
    calls = [c.plus(pid=pid) for c in action.calls]
    reports = ctx.run_calls(calls)  # the ports' owners in the same call
    died = bool(reports) and reports[-1].get("outcome") == "died"
    result = judged("ready", calls, reports, retryable=not died,
                    output=daemon_log_tail(ctx) if died else "")
    status = result.data.get("status")
    proved = check_ports(ctx, status if isinstance(status, dict) else None,
                         reports[-1].get("owners"))
    return ok(f"{result.reason}; {proved}", **result.data)
