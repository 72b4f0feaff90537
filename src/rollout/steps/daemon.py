"""The daemon's life on a host: supervisor, stop, start, ready (drain: steps/drain.py)."""

from __future__ import annotations

import hashlib
import json
import shlex
from dataclasses import dataclass
from typing import Any

from rollout.config.steps import ReadyParams, StartParams, StopParams, SuperviseParams
from rollout.errors import StepFailed
from rollout.host.facts import HostFacts, tcp_port
from rollout.host.layout import Layout, q
from rollout.host.scripts import script_text
from rollout.output.events import StepResult, changed, ok, skipped
from rollout.secrets import head
from rollout.steps.base import HostContext
from rollout.steps.decision import Action, Decision, Phase, Skip, Started, Stopped, Target
from rollout.steps.identity import PORTS_MARK, check_ports, parse_owners, ports_query, then_ports
from rollout.transport.base import RunResult
from rollout.units import format_size


def supervisor_conf(target: Target, params: SuperviseParams) -> str:
    daemon = target.settings.daemon
    launcher = params.launcher  # from the playbook alone: never an inventory var
    ports = [p for p in (tcp_port(daemon.listen), tcp_port(daemon.status_listen)) if p]
    conf = {"daemon_args": f"-c {shlex.quote(daemon.config_path)}", "launcher": str(launcher),
            "ports": ports, "daemon_env": {"NO_COLOR": "1"}}  # cuzk colours its log unless NO_COLOR
    return json.dumps(conf, indent=2, sort_keys=True) + "\n"


_UNTRUSTED = r"\( -type l -o -perm /022 -o ! \( -user 0 -o -user $(id -u) \) \)"


def trusted_supervisor(lay: Layout) -> str:
    """Shell, true when root may run supervisor.py: it, the state folder and the root (the
    root may be a link to its disk) are no links, owned by root (or by the user rollout runs
    as) and not group- or world-writable; else false, saying so on stderr. Checked before
    every start, single steps included (preflight's `files` check says the same for runs)."""
    return (f"bad=$(find -H {q(lay.root)} -maxdepth 0 {_UNTRUSTED} -print; "
            f"find {q(lay.state_dir)} {q(lay.supervisor)} -maxdepth 0 {_UNTRUSTED} -print); "
            '[ -z "$bad" ] || { echo "refused to run the supervisor:" $bad "is a link, not '
            "root's, or writable by others\" >&2; false; }")


def start_supervisor(ctx: HostContext) -> None:
    lay = ctx.layout
    ctx.sh(f"{trusted_supervisor(lay)} && "
           f"python3 {q(lay.supervisor)} --root {q(lay.root)} --daemonize").check()


def _sha256(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


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
                      params, (conf, alive, False, True))
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
    return Action(f"install the supervisor; {what}", params, (conf, alive, hold, False))


UNIT = """[Unit]
Description=rollout's supervisor of the cuzk daemon
After=network.target

[Service]
Type=forking
ExecStart={start}

[Install]
WantedBy=multi-user.target
"""


def register_command(ctx: HostContext) -> str:
    """Shell that registers the supervisor with the host's start-up mechanism, so that a
    container restart brings it back: the on-start script a host var names (onstart_script:
    vast.ai runs it at every container start), else an @reboot cron entry, else a systemd
    unit where systemd is PID 1. Writes the method to <state>/registered."""
    lay = ctx.layout
    start = f"python3 {q(lay.supervisor)} --root {q(lay.root)} --daemonize"
    mark = f"# rollout-supervisor {lay.root}"
    line = f"{start} {mark}"
    onstart = str(ctx.host_vars.get("onstart_script") or "")
    unit = UNIT.format(start=start)
    return (
        f"line={q(line)}; mark={q(mark)}; onstart={q(onstart)}; "
        'if [ -n "$onstart" ]; then '
        '{ [ -f "$onstart" ] || printf "#!/bin/sh\n" > "$onstart"; } && '
        '{ grep -qF -- "$mark" "$onstart" || printf "%s\n" "$line" >> "$onstart"; } && '
        'chmod +x "$onstart" && how="on-start script $onstart"; '
        "elif command -v crontab >/dev/null 2>&1; then "
        '{ crontab -l 2>/dev/null | grep -vF -- "$mark"; echo "@reboot $line"; } | crontab - '
        '&& how="cron @reboot"; '
        'elif [ "$(cat /proc/1/comm 2>/dev/null)" = systemd ]; then '
        f"printf '%s' {q(unit)} > /etc/systemd/system/rollout-supervisor.service && "
        "systemctl daemon-reload && systemctl enable rollout-supervisor.service >/dev/null "
        '&& how="systemd unit rollout-supervisor.service"; fi; '
        f'printf "%s\n" "${{how:-none}}" > {q(lay.state_dir + "/registered")}; '
        'echo "${how:-none}"'
    )


def supervise(ctx: HostContext, action: Action) -> StepResult:
    lay = ctx.layout
    conf, alive, hold, register_only = action.detail
    if register_only:
        how = ctx.sh(register_command(ctx)).stdout.strip() or "none"
        return changed(f"supervisor running; start-up registration: {how}")
    ctx.sh(f"mkdir -p -- {q(lay.state_dir)}").check()
    if hold:
        set_hold(ctx)
    ctx.write_if_changed(lay.supervisor, script_text("supervisor"))
    ctx.write_if_changed(lay.supervisor_conf, conf)
    if alive:  # the supervisor checks what supervisor.pid names before it signals anything
        ctx.sh(f"python3 {q(lay.supervisor)} --root {q(lay.root)} --stop")
    start_supervisor(ctx)
    registered = ctx.sh(register_command(ctx)).stdout.strip() or "none"
    what = "restarted (script or settings changed)" if alive else "started"
    what += f"; start-up registration: {registered}"
    return changed(f"supervisor {what}{', held (adopting)' if hold else ''}")


def hold_command(ctx: HostContext) -> str:
    return f"mkdir -p -- {q(ctx.layout.state_dir)} && touch -- {q(ctx.layout.hold)}"


def set_hold(ctx: HostContext) -> None:
    ctx.sh(hold_command(ctx)).check()


def release_hold(ctx: HostContext) -> None:
    ctx.sh(f"rm -f -- {q(ctx.layout.hold)}").check()


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


def stop_action(facts: HostFacts, target: Target, params: StopParams) -> Action:
    daemon = target.settings.daemon
    how = StopHow(params.signal or daemon.stop_signal,
                  daemon.stop_grace if params.grace is None else params.grace)
    adopt = tuple((p.pid, p.starttime) for p in facts.foreign_daemons
                  if p.starttime is not None) if target.settings.preflight.adopt else ()
    how = StopHow(how.signal, how.grace, adopt)
    old = facts.daemon
    what = f"daemon {old.pid} ({old.state})" if old.pid else "the daemon, if any"
    if adopt:
        what += f", and adopt daemon(s) {', '.join(str(p) for p, _ in adopt)}"
    summary = f"set the hold; stop {what} with {how.signal}, SIGKILL after {how.grace:g}s"
    return Action(summary, params, how)


def decide_stop(facts: HostFacts, target: Target, params: StopParams) -> Decision:
    skip = None if params.force else serving(facts, target)
    return _and(skip, "nothing to stop") if skip else stop_action(facts, target, params)


def stop(ctx: HostContext, action: Action) -> StepResult:
    how: StopHow = action.detail
    if how.adopt:
        set_hold(ctx)
        return _adopt(ctx, how)
    code, out = ctx.script(  # the hold first, in the same round trip
        "stop",
        "--root",
        ctx.layout.root,
        "--signal",
        how.signal,
        "--grace",
        how.grace,
        timeout=float(how.grace) + 30,
        before=hold_command(ctx),
    )
    ctx.state.stopped = Stopped.of(out)
    if out.get("outcome") == "none":
        return skipped("hold set; no daemon pidfile, nothing to stop", **out)
    if out.get("outcome") == "untrusted":
        return skipped(f"hold set; nothing signalled: {out.get('note')}", **out)
    if out.get("outcome") == "already-dead":
        return skipped(f"hold set; daemon {out['pid']} already {out['state']}", **out)
    if code != 0:
        raise StepFailed(
            f"daemon {out.get('pid')} survived {how.signal} and SIGKILL", retryable=False
        )
    how_text = f"{out['signal']}, escalated to SIGKILL" if out.get("escalated") else out["signal"]
    return changed(f"hold set; daemon {out['pid']} stopped ({how_text})", **out)


def _adopt(ctx: HostContext, how: StopHow) -> StepResult:
    """Stop daemons rollout's supervisor did not start, through the same signal, escalation
    and zombie-aware wait; the drain then waits for their memory. A respawn by their parent
    stops the run on this host: it keeps serving, and the parent is named."""
    done: list[dict[str, Any]] = []
    for pid, starttime in how.adopt:
        code, out = ctx.script(
            "stop", "--root", ctx.layout.root, "--signal", how.signal, "--grace", how.grace,
            "--adopt-pid", pid, "--adopt-starttime", starttime, timeout=float(how.grace) + 30,
        )
        if out.get("outcome") == "respawned":
            # nothing of ours changed what serves: no rollback; the hold stays so that the
            # supervisor never starts a daemon next to the respawned one
            ctx.state.phase = Phase.UNTOUCHED
            raise StepFailed(
                f"adopted daemon {pid} was respawned by its parent pid {out.get('parent')} "
                f"({out.get('parent_cmdline') or '?'}): new daemon(s) "
                f"{out.get('respawned')}; the host keeps serving from them. Hand the loop's "
                "cuzk over to rollout's supervisor first (docs/adopt.md)",
                retryable=False, data={"adopted": out},
            )
        if code != 0:
            raise StepFailed(f"adopted daemon {pid} survived {how.signal} and SIGKILL",
                             retryable=False, data={"adopted": out})
        done.append(out)
    ctx.state.stopped = Stopped.of(done[-1]) if done else None
    names = ", ".join(f"{o['pid']} ({o.get('cmdline') or '?'})" for o in done)
    return changed(f"hold set; adopted and stopped daemon(s) {names}", adopted=done)


def start_command(ctx: HostContext, seconds: float) -> str:
    """One round trip: find the release current points at (exit 3: none), release the hold,
    make sure the supervisor runs (a running one holds its flock and answers
    already-running; exit 5: it could not start), then wait up to `seconds` for it to run a
    daemon of that release and print its daemon.pid line (exit 1: it did not). The flock
    is tested first, as the supervisor itself tests it: a python3 that starts only to say
    already-running cost the host more than the rest of the step."""
    lay = ctx.layout
    pidfile = q(lay.daemon_pid)
    return (
        f"target=$(readlink -f -- {q(lay.current)}); [ -n \"$target\" ] || exit 3; "
        f"rm -f -- {q(lay.hold)} || exit 4; "
        f"flock -n -E 75 {q(lay.supervisor_lock)} true 2>/dev/null; [ $? -eq 75 ] || "
        f"{{ {trusted_supervisor(lay)} && "
        f"python3 {q(lay.supervisor)} --root {q(lay.root)} --daemonize >/dev/null; }} || exit 5; "
        f"for i in $(seq {int(seconds * 20)}); do "
        f'grep -qF -- "$target" {pidfile} 2>/dev/null && cat {pidfile} && exit 0; '
        f"sleep 0.05; done; exit 1"
    )


def decide_start(facts: HostFacts, target: Target, params: StartParams) -> Decision:
    """Start the release being rolled out; a single `start` starts what current points at."""
    rid = target.release_id or facts.current_release
    if not target.pending and rid and facts.serves(rid, target.layout.release_dir(rid)):
        return Skip(f"daemon {facts.daemon.pid} already runs release {rid}")
    what = "the new build" if target.pending else (rid or "the release current points at")
    return Action(f"release the hold; the supervisor starts {what}", params)


def start(ctx: HostContext, action: Action) -> StepResult:
    params: StartParams = action.params
    lay = ctx.layout
    r = ctx.sh(start_command(ctx, params.wait), timeout=params.wait + 15)
    if r.exit_code == 3:
        raise StepFailed(f"{lay.current} does not point at a release", retryable=False)
    if r.exit_code in (4, 5):
        what = "release the hold" if r.exit_code == 4 else "start the supervisor"
        raise StepFailed(f"could not {what}: {head(r.stderr.strip(), 300)}", output=r.stderr)
    if not r.ok:
        tail = ctx.sh(f"tail -n 20 -- {q(lay.daemon_log)} 2>/dev/null").stdout
        raise StepFailed(f"supervisor did not start the daemon within {params.wait:.0f}s",
                         output=tail)
    lines = r.stdout.strip().splitlines()
    if not lines:
        raise StepFailed("the supervisor's daemon.pid named the release but came back empty")
    pidline = lines[-1]
    ctx.state.started = Started(pidline)
    return changed(
        f"hold released; supervisor started daemon {pidline.split()[0]}", pidfile=pidline
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


def wait_ready(ctx: HostContext, seconds: float, url: str) -> tuple[RunResult, str, Any]:
    """One round trip: wait until the gRPC port accepts and then the status port answers
    (exit 3: the daemon died meanwhile; 1: not in time), then the ports' owners. The wait
    polls in one host process (ports.py --wait) where the daemon's ports are TCP; else it
    is a shell loop with curl."""
    daemon = ctx.settings.daemon
    known = ctx.state.started.pid if ctx.state.started else None
    _, _, args = ports_query(ctx)
    if args:
        watch = ["--watch", known] if known else ["--pidfile", ctx.layout.daemon_pid]
        r = ctx.run_script("ports", "--wait", seconds, "--grpc-url", _grpc_url(daemon.listen),
                           "--status-url", url, *watch, *args, timeout=seconds + 10)
        answer, mark, after = r.stdout.rpartition(f"\n{PORTS_MARK}\n")
        if not mark:
            return r, r.stdout, None
        return r, answer, parse_owners(r, after)
    pidfile = q(ctx.layout.daemon_pid)
    first = q(known) if known else f"$(cut -d' ' -f1 {pidfile} 2>/dev/null)"
    loop = (
        f"pid={first}; "
        f"for i in $(seq {int(seconds * 20)}); do "
        # the gRPC port bound (curl 7: refused, 28: timed out), then the status port answers
        f"curl -s --max-time 1 -o /dev/null {q(_grpc_url(daemon.listen))}; rc=$?; "
        f"if [ $rc -ne 7 ] && [ $rc -ne 28 ]; then curl -fsS --max-time 1 {q(url)} && exit 0; fi; "
        f"if [ -n \"$pid\" ] && ! grep -qv '^[^)]*) [ZX] ' /proc/$pid/stat 2>/dev/null; "
        f'then echo "daemon $pid died during start-up"; exit 3; fi; '
        f"sleep 0.05; done; exit 1"
    )
    return then_ports(ctx, loop, seconds + 10)


def ready(ctx: HostContext, action: Action) -> StepResult:
    """The gRPC port is bound and the status port answers (never a log line: cuzk prints
    "ready, serving on" before it binds, and binds the status port before the gRPC one).
    Fails early if the daemon dies meanwhile."""
    params: ReadyParams = action.params
    daemon = ctx.settings.daemon
    seconds = float(daemon.ready_timeout if params.timeout is None else params.timeout)
    url = status_url(daemon.status_listen)
    r, answer, owners = wait_ready(ctx, seconds, url)  # the ports' owners in the same trip
    if r.exit_code == 3:
        tail = ctx.sh(f"tail -n 20 -- {q(ctx.layout.daemon_log)} 2>/dev/null").stdout
        raise StepFailed(
            f"{r.stdout.strip()}; status port {url} never answered", retryable=False, output=tail
        )
    if not r.ok:
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
