"""The daemon's life on a host: supervisor, stop, start, ready (drain: steps/drain.py)."""

from __future__ import annotations

import json
import shlex
from typing import Any

from rollout.errors import StepFailed
from rollout.events import StepResult, changed, ok, skipped
from rollout.hostside import script_text
from rollout.layout import q
from rollout.secrets import head
from rollout.steps.base import HostContext


def _supervisor_conf(ctx: HostContext, params: dict[str, Any]) -> str:
    daemon = ctx.settings.daemon
    launcher = params.get("launcher") or ctx.host_vars.get("daemon_launcher") or ""
    conf = {"daemon_args": f"-c {shlex.quote(daemon.config_path)}", "launcher": str(launcher)}
    return json.dumps(conf, indent=2, sort_keys=True) + "\n"


def supervisor_alive(facts: dict[str, Any]) -> bool:
    return bool((facts.get("supervisor") or {}).get("alive"))


def start_supervisor(ctx: HostContext) -> None:
    lay = ctx.layout
    ctx.sh(f"python3 {q(lay.supervisor)} --root {q(lay.root)} --daemonize").check()


def supervise(ctx: HostContext, params: dict[str, Any]) -> StepResult:
    """Install the supervisor and its settings; (re)start it if either changed."""
    lay = ctx.layout
    ctx.sh(f"mkdir -p -- {q(lay.state_dir)}").check()
    script_changed = ctx.write_if_changed(lay.supervisor, script_text("supervisor"))
    conf_changed = ctx.write_if_changed(lay.supervisor_conf, _supervisor_conf(ctx, params))
    alive = supervisor_alive(ctx.facts())
    if alive and not (script_changed or conf_changed):
        return skipped("supervisor running, script and settings unchanged")
    if alive:  # the supervisor checks what supervisor.pid names before it signals anything
        ctx.sh(f"python3 {q(lay.supervisor)} --root {q(lay.root)} --stop")
    start_supervisor(ctx)
    what = "restarted (script or settings changed)" if alive else "started"
    return changed(f"supervisor {what}")


def set_hold(ctx: HostContext) -> None:
    ctx.sh(f"mkdir -p -- {q(ctx.layout.state_dir)} && touch -- {q(ctx.layout.hold)}").check()


def release_hold(ctx: HostContext) -> None:
    ctx.sh(f"rm -f -- {q(ctx.layout.hold)}").check()


def runs_release(ctx: HostContext) -> dict[str, Any] | None:
    """The daemon's facts when it already runs the release being rolled out."""
    if ctx.release is None:
        return None
    facts = ctx.facts()
    daemon = facts.get("daemon") or {}
    release_dir = ctx.layout.release_dir(ctx.release.id)
    if (
        facts.get("current_release") == ctx.release.id
        and daemon.get("state") == "running"
        and release_dir in str(daemon.get("exe"))
        and not facts.get("held")
    ):
        return daemon
    return None


def stop(ctx: HostContext, params: dict[str, Any]) -> StepResult:
    daemon = ctx.settings.daemon
    running = None if params.get("force") else runs_release(ctx)
    ctx.notes["already_running"] = running is not None
    if running is not None:
        return skipped(
            f"daemon {running.get('pid')} already runs release "
            f"{ctx.release.id if ctx.release else ''}: nothing to stop"
        )
    set_hold(ctx)
    sig = params.get("signal", daemon.stop_signal)
    grace = params.get("grace", daemon.stop_grace)
    code, out = ctx.script(
        "stop",
        "--root",
        ctx.layout.root,
        "--signal",
        sig,
        "--grace",
        grace,
        timeout=float(grace) + 30,
    )
    ctx.notes["stopped"] = out
    if out.get("outcome") == "none":
        return skipped("hold set; no daemon pidfile, nothing to stop", **out)
    if out.get("outcome") == "untrusted":
        return skipped(f"hold set; nothing signalled: {out.get('note')}", **out)
    if out.get("outcome") == "already-dead":
        return skipped(f"hold set; daemon {out['pid']} already {out['state']}", **out)
    if code != 0:
        raise StepFailed(f"daemon {out.get('pid')} survived {sig} and SIGKILL", retryable=False)
    how = f"{out['signal']}, escalated to SIGKILL" if out.get("escalated") else out["signal"]
    return changed(f"hold set; daemon {out['pid']} stopped ({how})", **out)


def _wait_daemon_of(ctx: HostContext, release_dir: str, seconds: float) -> str:
    pidfile = q(ctx.layout.daemon_pid)
    loop = (
        f"for i in $(seq {int(seconds * 10)}); do "
        f"grep -qF -- {q(release_dir)} {pidfile} 2>/dev/null && cat {pidfile} && exit 0; "
        f"sleep 0.1; done; exit 1"
    )
    r = ctx.sh(loop, timeout=seconds + 10)
    if not r.ok:
        tail = ctx.sh(f"tail -n 20 -- {q(ctx.layout.daemon_log)} 2>/dev/null").stdout
        raise StepFailed(f"supervisor did not start the daemon within {seconds:.0f}s", output=tail)
    return r.stdout.strip()


def start(ctx: HostContext, params: dict[str, Any]) -> StepResult:
    lay = ctx.layout
    target = ctx.sh(f"readlink -f -- {q(lay.current)}").stdout.strip()
    if not target:
        raise StepFailed(f"{lay.current} does not point at a release", retryable=False)
    facts = ctx.facts()  # one read: hold, daemon and supervisor as they are now
    running = facts.get("daemon") or {}
    if not facts.get("held") and running.get("state") == "running" and target in str(
        running.get("exe")
    ):
        return skipped(f"daemon {running.get('pid')} already runs {target}")
    release_hold(ctx)
    if not supervisor_alive(facts):
        start_supervisor(ctx)
    pidline = _wait_daemon_of(ctx, target, float(params.get("wait", 30)))
    ctx.notes["daemon_pid"] = pidline.split()[0]
    return changed(
        f"hold released; supervisor started daemon {pidline.split()[0]}", pidfile=pidline
    )


def status_url(status_listen: str) -> str:
    host, _, port = status_listen.rpartition(":")
    if host in ("0.0.0.0", "", "[::]", "::"):
        host = "127.0.0.1"
    return f"http://{host}:{port}/status"


def ready(ctx: HostContext, params: dict[str, Any]) -> StepResult:
    """The status port answers (never a log line). Fails early if the daemon dies meanwhile."""
    daemon = ctx.settings.daemon
    seconds = float(params.get("timeout", daemon.ready_timeout))
    url = status_url(daemon.status_listen)
    pidfile = q(ctx.layout.daemon_pid)
    known = ctx.notes.get("daemon_pid")
    first = q(known) if known else f"$(cut -d' ' -f1 {pidfile} 2>/dev/null)"
    loop = (
        f"pid={first}; "
        f"for i in $(seq {int(seconds * 5)}); do "
        f"curl -fsS --max-time 1 {q(url)} && exit 0; "
        f"if [ -n \"$pid\" ] && ! grep -qv '^[^)]*) [ZX] ' /proc/$pid/stat 2>/dev/null; "
        f'then echo "daemon $pid died during start-up"; exit 3; fi; '
        f"sleep 0.2; done; exit 1"
    )
    r = ctx.sh(loop, timeout=seconds + 10)
    if r.exit_code == 3:
        tail = ctx.sh(f"tail -n 20 -- {q(ctx.layout.daemon_log)} 2>/dev/null").stdout
        raise StepFailed(
            f"{r.stdout.strip()}; status port {url} never answered", retryable=False, output=tail
        )
    if not r.ok:
        raise StepFailed(f"status port {url} did not answer within {seconds:.0f}s")
    try:
        status = json.loads(r.stdout)
    except ValueError as e:
        got = head(r.stdout, 200)
        raise StepFailed(f"{url} answered with something that is not JSON: {got}") from e
    return ok(
        f"status port answers (version {status.get('version')}, up {status.get('uptime_secs')}s)",
        status=status,
    )
