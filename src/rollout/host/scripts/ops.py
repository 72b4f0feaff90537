"""rollout's host API: every action that changes the daemon's host, written once.

Each action is a function that takes keyword arguments (JSON data, never code) and returns
a JSON-able report: "outcome" (one word) and "reason" (what it did, or why it did nothing:
each action checks before it acts). The controller's steps call them through the host's
agent ({"call": "ops.stop", "kwargs": {...}}) or, without an agent, as

    python3 -c BOOTSTRAP --call stop --kwargs-stdin   (stdin: this script, sized; the kwargs)

and the guard calls the same functions when it takes over. One JSON line is printed: the
report. Every path under the root is opened through common.py's safe_* helpers (a link
planted there is refused, never followed). Standard library only; python3 >= 3.9.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal as signals
import stat
import sys
import time
from typing import Any

# ruff: noqa: E501
# isort: off
from rollout.host.scripts.common import cgroup_memory, cuzk_processes, distrust_daemon, distrust_supervisor, is_cuzk_daemon, ownership_problem, ports_owners, proc_ancestors, proc_cmdline, proc_starttime, proc_stat, proc_state, process_brief, proof_verdict, read_pidfile, read_text, safe_append, safe_mkdir, safe_open, safe_remove, safe_write  # inlined on hosts
# isort: on

POLL = 0.05  # seconds between looks
STOPPED = (124, 137)  # timeout's status when it stopped the proof (TERM, KILL)


def _state_dir(root: str) -> str:
    return os.path.join(root, "rollout")


def _release_id_ok(release: str) -> bool:
    return bool(release) and "/" not in release and release not in (".", "..") \
        and not release.startswith(".")


def _report(outcome: str, reason: str, **data: Any) -> dict[str, Any]:
    return {"outcome": outcome, "reason": reason, **data}


# ---------------------------------------------------------------- the hold


def hold(root: str) -> dict[str, Any]:
    """Set the hold: the supervisor restarts no daemon while <root>/rollout/hold exists."""
    path = os.path.join(_state_dir(root), "hold")
    if os.path.lexists(path):
        return _report("kept", "hold already set")
    safe_mkdir(_state_dir(root))
    os.close(safe_open(path, os.O_WRONLY | os.O_CREAT, 0o644))
    return _report("set", "hold set")


def release_hold(root: str) -> dict[str, Any]:
    if safe_remove(os.path.join(_state_dir(root), "hold")):
        return _report("released", "hold released")
    return _report("none", "no hold was set")


# ---------------------------------------------------------------- stop (our daemon, or adopt one)


def _daemon_state(proc: str, root: str, pid: int, starttime: int, exe: str) -> str:
    """running, zombie or gone: a pid that is no longer our daemon (reused) is gone."""
    state = proc_state(proc, pid, starttime)[0]
    if state != "running":
        return state
    return "gone" if distrust_daemon(proc, root, pid, starttime, exe) else "running"


def _adopted_state(proc: str, pid: int, starttime: int) -> str:
    """running, zombie or gone for a daemon being adopted: still a cuzk daemon at that start."""
    state = proc_state(proc, pid, starttime)[0]
    if state != "running":
        return state
    return "running" if is_cuzk_daemon(proc, pid) else "gone"


def _wait_dead(state_now: Any, seconds: float) -> str:
    end = time.monotonic() + seconds
    state: str = state_now()
    while state == "running" and time.monotonic() < end:
        time.sleep(POLL)
        state = state_now()
    return state


def _signal_and_wait(pid: int, state_now: Any, sig_name: str, grace: float) -> dict[str, Any]:
    sig = signals.Signals[sig_name]
    os.kill(pid, sig)
    out: dict[str, Any] = {"signal": sig.name, "signalled_at": time.time()}
    state = _wait_dead(state_now, grace)
    if state == "running":
        os.kill(pid, signals.SIGKILL)
        out.update(escalated=True, killed_at=time.time())
        state = _wait_dead(state_now, 10)
    stopped = state != "running"
    how = f"{sig.name}, escalated to SIGKILL" if out.get("escalated") else sig.name
    out.update(outcome="stopped" if stopped else "still-running", state=state,
               died_at=time.time(),
               reason=f"daemon {pid} stopped ({how})" if stopped
               else f"daemon {pid} survived {sig.name} and SIGKILL")
    return out


def _respawned(proc: str, parent: int | None, old: int, window: float) -> list[dict[str, Any]]:
    """New cuzk daemons whose parent is the adopted daemon's parent (a loop respawning it)."""
    if not parent or parent <= 1:
        return []
    end = time.monotonic() + window
    while True:
        found = [p for p in cuzk_processes(proc, None)
                 if p["ppid"] == parent and p["pid"] != old and p["state"] == "running"]
        if found or time.monotonic() >= end:
            return found
        time.sleep(POLL)


def _record_adoption(root: str, out: dict[str, Any]) -> None:
    """An exit record for the adopted daemon, like the supervisor's for its own."""
    mem = cgroup_memory("/sys/fs/cgroup")
    rec = {"time": out.get("died_at"), "recorded": time.time(), "pid": out["pid"],
           "adopted": True, "adopted_by": "rollout stop", "cmdline": out.get("cmdline"),
           "signal": out.get("signal"), "exit_code": None, "held": True,
           "memory": {"usage": mem["usage"], "limit": mem["limit"], "source": mem["source"]},
           "oom": mem["oom"], "note": "a daemon rollout's supervisor did not start, adopted: "
           "stopped so that the supervisor's daemon replaces it"}
    try:
        safe_mkdir(_state_dir(root))
        safe_append(os.path.join(_state_dir(root), "exits.jsonl"),
                    json.dumps(rec, sort_keys=True) + "\n", 0o644)
    except OSError:
        pass


def _adopt(root: str, proc: str, pid: int, starttime: int | None, sig: str, grace: float,
           window: float) -> dict[str, Any]:
    """Stop a daemon rollout's supervisor did not start, named by pid and start time from
    fresh facts (never a pidfile): only while it is still a cuzk daemon at that start time."""
    if pid <= 1 or starttime is None or proc_starttime(proc, pid) != starttime \
            or not is_cuzk_daemon(proc, pid):
        return _report("already-dead", f"daemon {pid} to adopt is already gone", pid=pid,
                       starttime=starttime, state="gone", adopted=True)
    parent = proc_state(proc, pid, starttime)[1]
    out: dict[str, Any] = {
        "pid": pid, "starttime": starttime, "exe": "", "adopted": True, "parent": parent,
        "parent_cmdline": " ".join(proc_cmdline(proc, parent or 0))[:300],
        "cmdline": " ".join(proc_cmdline(proc, pid))[:300]}
    out.update(_signal_and_wait(pid, lambda: _adopted_state(proc, pid, starttime), sig, grace))
    if out["outcome"] == "stopped":
        again = _respawned(proc, parent, pid, window)
        if again:
            out.update(outcome="respawned", respawned=[p["pid"] for p in again],
                       reason=f"daemon {pid} was respawned by its parent {parent}")
        _record_adoption(root, out)
    return out


def stop(root: str, signal: str = "SIGTERM", grace: float = 10.0, set_hold: bool = True,
         adopt_pid: int = 0, adopt_starttime: int | None = None, respawn_window: float = 3.0,
         keep_release: str | None = None, proc: str = "/proc") -> dict[str, Any]:
    """Set the hold (set_hold), then stop the daemon daemon.pid names, confirmed through
    /proc (never a pid that is not our daemon: "untrusted"), escalating to SIGKILL after
    `grace`; or the hand-started daemon adopt_pid (adopt). keep_release: a daemon of that
    release is kept ("kept")."""
    if keep_release:
        kept = serving(root, keep_release, proc)
        if kept:
            return _report("kept", f"daemon {kept[0]} runs release {keep_release}: kept",
                           pid=kept[0], starttime=kept[1])
    held = hold(root)["outcome"] == "set" if set_hold else False
    out = _stop(root, signal, grace, adopt_pid, adopt_starttime, respawn_window, proc)
    out["held"] = held
    return out


def _stop(root: str, sig: str, grace: float, adopt_pid: int, adopt_starttime: int | None,
          window: float, proc: str) -> dict[str, Any]:
    if adopt_pid:
        return _adopt(root, proc, adopt_pid, adopt_starttime, sig, grace, window)
    found = read_pidfile(os.path.join(_state_dir(root), "daemon.pid"))
    pid, starttime, exe = found if found is not None else (0, None, "")
    if starttime is None:  # no pidfile, or one without a start time to confirm the pid by
        return _report("none", "no daemon pidfile: nothing to stop")
    state = proc_state(proc, pid, starttime)[0]
    if state != "running" and pid > 1:
        return _report("already-dead", f"daemon {pid} already {state}", pid=pid,
                       starttime=starttime, exe=exe, state=state)
    distrust = distrust_daemon(proc, root, pid, starttime, exe)
    if distrust:  # never signal what a pidfile names unless it is our daemon
        return _report("untrusted", f"nothing signalled: daemon.pid: {distrust}",
                       named_pid=pid, note=f"daemon.pid: {distrust}")
    out: dict[str, Any] = {"pid": pid, "starttime": starttime, "exe": exe}
    out.update(_signal_and_wait(
        pid, lambda: _daemon_state(proc, root, pid, starttime, exe), sig, grace))
    return out


# ---------------------------------------------------------------- drain (drain.py's rule)


def drain_args(root: str, pid: int, starttime: int | None,
               settings: dict[str, Any] | None) -> list[str]:
    """drain.py's arguments: the settings as the controller computed them (deadline,
    plateau, zombie grace, and the budget rule's figure: an int, else none)."""
    args = ["--root", root, "--pid", str(pid)]
    args += ["--starttime", str(starttime)] if starttime is not None else []
    given = settings if isinstance(settings, dict) else {}
    for key in ("deadline", "plateau", "zombie_grace"):
        if _number(given.get(key)):
            args += [f"--{key.replace('_', '-')}", repr(float(given[key]))]
    if isinstance(given.get("budget"), int) and not isinstance(given.get("budget"), bool):
        args += ["--budget", str(given["budget"])]  # bytes, as the controller decided them
    return args


def _dead_daemon(root: str, proc: str) -> tuple[int, int | None]:
    """(pid, start time) of the daemon daemon.pid names while it is a zombie (stopped, not
    yet reaped); (0, None) otherwise."""
    found = read_pidfile(os.path.join(_state_dir(root), "daemon.pid"))
    if found is None or found[1] is None or found[0] <= 1:
        return 0, None
    zombie = proc_state(proc, found[0], found[1])[0] == "zombie"
    return (found[0], found[1]) if zombie else (0, None)


def drain(root: str, script: str, pid: int = 0, starttime: int | None = None,
          settings: dict[str, Any] | None = None, keep_release: str | None = None,
          proc: str = "/proc") -> dict[str, Any]:
    """drain.py's rule, run from `script` (the drain script the controller left on the
    host): the stopped daemon (pid 0: the zombie daemon.pid names, if any) is gone and its
    memory back. `settings`: as the controller computed them. drain.py's own report, its
    outcome "drained" or why not; "kept" where a daemon of keep_release runs (nothing
    was stopped)."""
    import subprocess

    kept = serving(root, keep_release, proc) if keep_release else None
    if kept:
        return _report("kept", f"daemon {kept[0]} runs release {keep_release}: nothing was "
                       "stopped", pid=kept[0])
    if not os.path.isfile(script) or os.path.islink(script):
        return _report("no-script", f"no drain script at {script}")
    if not pid:
        pid, starttime = _dead_daemon(root, proc)
    given = settings if isinstance(settings, dict) else {}
    deadline = float(given["deadline"]) if _number(given.get("deadline")) else 600.0
    p = subprocess.run([sys.executable or "python3", script,
                        *drain_args(root, pid, starttime, given)], stdin=subprocess.DEVNULL,
                       capture_output=True, timeout=deadline + 60, check=False)
    lines = p.stdout.decode("utf-8", "replace").strip().splitlines()
    try:
        out = json.loads(lines[-1]) if lines else None
    except ValueError:
        out = None
    if not isinstance(out, dict) or not out.get("outcome"):
        return _report("silent", f"drain.py said nothing (exit {p.returncode}): "
                       f"{p.stderr.decode('utf-8', 'replace')[-300:]}")
    return out


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


# ---------------------------------------------------------------- current and its config


def current_release(root: str) -> str | None:
    try:
        found = os.path.basename(os.readlink(os.path.join(root, "current")).rstrip("/"))
    except OSError:
        return None
    return found if _release_id_ok(found) else None


def point_current(root: str, release: str) -> dict[str, Any]:
    """Atomically repoint <root>/current at releases/RELEASE: a new link renamed over it."""
    if not _release_id_ok(release):
        return _report("refused", f"not a release id: {release[:80]!r}")
    before = current_release(root)
    if before == release:
        return _report("kept", f"current already points at {release}", previous=before)
    where = os.path.join(root, "releases", release)
    if not os.path.isdir(where) or os.path.islink(where):
        return _report("missing", f"release {release} is not on the host", previous=before)
    tmp = os.path.join(root, "current.new")
    safe_remove(tmp)  # a link or file left there: the entry itself, never its target
    os.symlink(f"releases/{release}", tmp)
    os.replace(tmp, os.path.join(root, "current"))
    return _report("pointed", f"current: {before or 'none'} -> {release}", previous=before)


def restore_config(config_path: str, kept_config: str) -> dict[str, Any]:
    """Put back the config a release ran with (kept_config) at config_path, if it differs."""
    if not config_path or not kept_config:
        return _report("none", "no config to restore")
    fd = _open_read(kept_config)
    if fd is None:
        return _report("none", f"no kept config at {kept_config}")
    with os.fdopen(fd, "rb") as f:
        want = f.read()
    have = _open_read(config_path)
    if have is not None:
        with os.fdopen(have, "rb") as f:
            if f.read() == want:
                return _report("kept", f"{config_path} already holds the kept config")
    safe_write(config_path, want)  # never through a link
    return _report("restored", f"restored {config_path} from {kept_config}")


def _open_read(path: str) -> int | None:
    try:
        return safe_open(path, os.O_RDONLY)
    except OSError:
        return None


# ---------------------------------------------------------------- start and ready


def serving(root: str, release: str, proc: str = "/proc") -> tuple[int, int, str] | None:
    """(pid, start time, exe) of our daemon while it runs `release`, else None."""
    found = read_pidfile(os.path.join(_state_dir(root), "daemon.pid"))
    if found is None or found[1] is None or found[0] <= 1:
        return None
    pid, starttime, exe = found[0], int(found[1]), found[2]
    if proc_state(proc, pid, starttime)[0] != "running" \
            or distrust_daemon(proc, root, pid, starttime, exe):
        return None
    return (pid, starttime, exe) if exe.startswith(
        os.path.join(root, "releases", release) + "/") else None


def _supervisor_alive(root: str, proc: str) -> bool:
    found = read_pidfile(os.path.join(_state_dir(root), "supervisor.pid"))
    if found is None or found[0] <= 1:
        return False
    pid, starttime = found[0], found[1]
    return proc_state(proc, pid, starttime)[0] == "running" \
        and not distrust_supervisor(proc, root, pid, starttime)


def _supervisor_problem(root: str) -> str | None:
    """Why root may not run <root>/rollout/supervisor.py (None: it may): it, the state
    folder and the root (a link to its disk allowed) must be no links, owned by root (or
    the user rollout runs as) and not group- or world-writable."""
    state, script = _state_dir(root), os.path.join(_state_dir(root), "supervisor.py")
    why = (ownership_problem(root, "rollout's root", follow=True)
           or ownership_problem(state, "rollout's state folder")
           or ownership_problem(script, "running the supervisor"))
    return f"refused to run the supervisor: {why}" if why else None


def _start_supervisor(root: str) -> str | None:
    """Start the supervisor (it refuses itself when one runs); why not, else None."""
    import subprocess

    why = _supervisor_problem(root)
    if why:  # root never runs a script others could have written
        return why
    script = os.path.join(_state_dir(root), "supervisor.py")
    p = subprocess.run([sys.executable or "python3", script, "--root", root, "--daemonize"],
                       stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                       stderr=subprocess.PIPE, timeout=60, check=False)
    return None if p.returncode == 0 else (
        f"the supervisor did not start (exit {p.returncode}): "
        f"{p.stderr.decode('utf-8', 'replace')[-300:]}")


def run_supervisor(root: str, restart: bool = False) -> dict[str, Any]:
    """Start the supervisor, never one others could have written; restart: the running one
    is told to stop first (it checks what supervisor.pid names before it signals)."""
    import subprocess

    why = _supervisor_problem(root)
    if why:
        return _report("refused", why)
    if restart:
        subprocess.run([sys.executable or "python3", os.path.join(_state_dir(root),
                        "supervisor.py"), "--root", root, "--stop"], stdin=subprocess.DEVNULL,
                       capture_output=True, timeout=120, check=False)
    why = _start_supervisor(root)
    if why:
        return _report("refused", why)
    return _report("restarted" if restart else "started",
                   "supervisor restarted" if restart else "supervisor started")


def start(root: str, wait: float = 60.0, proc: str = "/proc") -> dict[str, Any]:
    """Release the hold and have the supervisor run a daemon of the release current points
    at (starting the supervisor where none runs); wait up to `wait` s for that daemon."""
    release = current_release(root)
    if release is None or not os.path.isdir(os.path.join(root, "releases", release)):
        return _report("no-release", f"{root}/current does not point at a release")
    already = serving(root, release, proc)
    released = release_hold(root)["outcome"] == "released"
    if not _supervisor_alive(root, proc):
        why = _start_supervisor(root)
        if why:
            return _report("refused", why, release=release, released=released)
    end = time.monotonic() + wait
    while True:
        running = serving(root, release, proc)
        if running:
            line = read_text(os.path.join(_state_dir(root), "daemon.pid")) or ""
            word = "running" if already and already[:2] == running[:2] else "started"
            verb = "already runs" if word == "running" else "started by the supervisor:"
            return _report(word, f"daemon {running[0]} {verb} {release}", pid=running[0],
                           starttime=running[1], release=release, released=released,
                           pidline=line.strip())
        if time.monotonic() >= end:
            return _report("not-started", f"the supervisor did not start the daemon of "
                           f"{release} within {wait:g}s", release=release, released=released)
        time.sleep(POLL)


def _accepts(url: str) -> bool:
    """The URL's port takes a TCP connection."""
    import socket
    from urllib.parse import urlsplit

    parts = urlsplit(url)
    try:
        with socket.create_connection((parts.hostname or "127.0.0.1", parts.port or 80), 1):
            return True
    except OSError:
        return False


def _status_answer(url: str, timeout: float = 1.0) -> str | None:
    """The status port's answer (HTTP below 400), else None."""
    import http.client
    from urllib.parse import urlsplit

    parts = urlsplit(url)
    conn = http.client.HTTPConnection(parts.hostname or "127.0.0.1", parts.port or 80,
                                      timeout=timeout)
    try:
        conn.request("GET", parts.path or "/")
        reply = conn.getresponse()
        body = reply.read(1 << 20).decode("utf-8", "replace")
        return body if reply.status < 400 else None
    except (OSError, http.client.HTTPException):
        return None
    finally:
        conn.close()


def owners(ports: list[int], pid: int | None = None, proc: str = "/proc") -> dict[str, Any]:
    """Who holds the daemon's TCP ports and, for `pid`, that process's age."""
    found = ports_owners(proc, ports)
    out: dict[str, Any] = {"ports": {str(p): found[p] for p in ports}}
    if pid is not None:
        out["pid"] = process_brief(proc, pid) if proc_stat(proc, pid) else None
    return out


def strangers(ports: list[int], pid: int, proc: str = "/proc") -> list[int]:
    """The ports some process other than `pid` (or a child of it) holds, or none holds."""
    found = ports_owners(proc, ports)
    return [p for p in ports if not found[p] or not all(
        o["pid"] == pid or pid in proc_ancestors(proc, o["pid"]) for o in found[p])]


def wait_ready(status_url: str, seconds: float, grpc_url: str = "", watch: int = 0,
               pidfile: str = "", ports: list[int] | None = None, pid: int | None = None,
               require_owner: bool = False, proc: str = "/proc") -> dict[str, Any]:
    """Wait until the gRPC port accepts and then the status port answers (cuzk binds the
    status port first; no status_url: the gRPC port alone); "died" once the daemon (watch,
    else the pid `pidfile` names) is gone. "ready" carries the status answer and the
    ports' owners; require_owner: "stranger" unless the daemon itself holds every port."""
    if not watch and pidfile:
        found = read_pidfile(pidfile)
        watch = found[0] if found and found[0] > 0 else 0
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        if not grpc_url or _accepts(grpc_url):
            answer = _status_answer(status_url) if status_url else ""
            if answer is not None:
                return _ready(status_url, answer, list(ports or []), pid, watch,
                              require_owner, proc)
        if watch and proc_state(proc, watch, None)[0] != "running":
            return _report("died", f"daemon {watch} died during start-up", pid=watch)
        time.sleep(POLL)
    return _report("timeout", f"status port {status_url or grpc_url} did not answer within "
                   f"{seconds:g}s")


def _ready(url: str, answer: str, ports: list[int], pid: int | None, watch: int,
           require_owner: bool, proc: str) -> dict[str, Any]:
    held = owners(ports, pid, proc)
    if require_owner and ports:
        if not watch or proc_state(proc, watch, None)[0] != "running":
            return _report("died", "the daemon is not running", owners=held)
        others = strangers(ports, watch, proc)
        if others:
            return _report("stranger", f"port(s) {others} not held by daemon {watch}",
                           owners=held)
    return _report("ready", f"{url or 'the daemon'} answered; ports {ports} are its own"
                   if require_owner else f"{url} answered", answer=answer, owners=held)


# ---------------------------------------------------------------- prove


def _status_doc(url: str) -> dict[str, Any] | None:
    answer = _status_answer(url) if url else None
    try:
        doc = json.loads(answer) if answer is not None else None
    except ValueError:
        return None
    return doc if isinstance(doc, dict) else None


def executable_problem(command: str, release: str = "") -> str | None:
    """Why the command's executable is not on the host (None: it is): a bench at a path must
    be an executable file there, a bare name on PATH. validate.env's `export NAME=...; `
    words before it are skipped."""
    import shlex
    import shutil

    try:
        words = shlex.split(command)
    except ValueError:
        words = []
    while words[:1] == ["export"]:
        words = words[2:]
    exe = words[0] if words else ""
    found = (os.path.isfile(exe) and os.access(exe, os.X_OK)) if "/" in exe else bool(
        exe and shutil.which(exe))
    of = f" of release {release}" if release else ""
    return None if found else f"the validation executable{of} is not on the host: {exe!r}"


def prove(command: str, timeout: float, kill_after: float, evidence: str = "",
          record: str = "", pattern: str = "", status_url: str = "", release: str = "",
          require_executable: bool = False, watch: dict[str, Any] | None = None
          ) -> dict[str, Any]:
    """Run the validation proof (`sh -c command`) under `timeout`; the evidence of an
    earlier validation goes first, `record` is written again only when stdout passes
    proof_verdict (stderr never counts). /status is asked after a proof that was stopped.
    require_executable: never run a bench that is not on the host ("missing").
    watch ({"partition": bytes, "wait": seconds}, with status_url): /status is read every
    second while the proof runs; a proof whose job waits for budget is stopped as on
    timeout (outcome "budget-wait"; see budget_waiting)."""
    import subprocess

    if not command.strip():
        return _report("no-command", f"no validation command for release {release or '?'}")
    missing = executable_problem(command, release) if require_executable else None
    if missing:
        return _report("missing", f"{missing}; not validated")
    if evidence:
        safe_remove(evidence)  # a link there: the link itself, never its target
    started = time.monotonic()
    argv = ["timeout", "-k", f"{kill_after:g}", f"{timeout:g}", "sh", "-c", command]
    if watch and status_url:
        returncode, raw_out, raw_err, waited = _run_watched(argv, kill_after, status_url, watch)
    else:
        r = subprocess.run(argv, stdin=subprocess.DEVNULL, capture_output=True, check=False)
        returncode, raw_out, raw_err, waited = r.returncode, r.stdout, r.stderr, None
    stdout = raw_out.decode("utf-8", "replace")
    code = 128 - returncode if returncode < 0 else returncode
    passed, why = proof_verdict(stdout, pattern) if pattern else (False, "no pattern")
    out = _report("ran", f"the proof exited {code}", exit=code,
                  elapsed=round(time.monotonic() - started, 3), stdout=stdout,
                  stderr=raw_err.decode("utf-8", "replace"), status_after=None, recorded=False,
                  passed=passed, verdict=why)
    if waited is not None:
        out.update(outcome="budget-wait", budget_wait=waited, passed=False,
                   reason=f"the proof's job waited {waited['waited']:g} s for budget: stopped")
        return out
    if code in STOPPED and status_url:
        out["status_after"] = _status_doc(status_url)
    if evidence and record and passed:
        safe_write(evidence, (record + "\n").encode())  # 0600, never through a link
        out["recorded"] = True
    return out


# ---------------------------------------------------------------- a proof waiting for budget

ACTIVE = ("synthesizing", "synth_done", "gpu")  # a partition that holds its reservation
BUDGET_POLL = 1.0  # seconds between looks at /status while the proof runs
BUDGET_SETTLE = 2  # looks in a row that must show the wait before it counts


def _count(value: Any) -> int | None:
    """A whole number of bytes (or partitions) from /status: hostile data, so a bool, a
    float, a string, a negative or absurd figure is None."""
    if isinstance(value, bool) or not isinstance(value, int):
        return None
    return value if 0 <= value < (1 << 60) else None


def _job(entry: Any) -> dict[str, Any] | None:
    """One /status pipelines entry as plain, bounded data (hostile: every field's type
    checked), the one reader of cuzk's pipelines for the proof's watch and the work-aware
    stop: its id (job_id, a string or a number) and kind, its age (started_secs_ago), its
    partitions by state, and whether it has ended (cuzk keeps an ended pipeline in /status:
    every partition done, or one failed). An id of another type reads "?". None when it is
    not an object."""
    if not isinstance(entry, dict):
        return None
    parts = entry.get("partitions")
    states = [p.get("state") for p in parts[:4096] if isinstance(p, dict)] if isinstance(
        parts, list) else []
    total: Any = entry.get("total_partitions")
    done: Any = entry.get("partitions_done")
    finished = _number(total) and _number(done) and 0 < total <= done
    return {"id": _job_id(entry.get("job_id")), "kind": _job_id(entry.get("proof_kind")),
            "age": _age(entry.get("started_secs_ago")),
            "pending": sum(1 for s in states if s == "pending"),
            "active": sum(1 for s in states if s in ACTIVE),
            "done": sum(1 for s in states if s == "done"), "total": len(states),
            "ended": bool(finished) or "failed" in states}


def _jobs(doc: Any) -> list[dict[str, Any]]:
    pipelines = doc.get("pipelines") if isinstance(doc, dict) else None
    jobs = [_job(e) for e in pipelines[:256]] if isinstance(pipelines, list) else []
    return [j for j in jobs if j is not None]


def job_ids(doc: Any) -> list[str]:
    """The ids of the jobs /status lists (before the proof is submitted)."""
    return [j["id"] for j in _jobs(doc)]


def _pinned(doc: Any) -> int:
    """Bytes the SRS and PCE allocations /status lists hold (cuzk's permanent ones)."""
    alloc = doc.get("allocations") if isinstance(doc, dict) else None
    total = 0
    for key in ("srs", "pce"):
        items = alloc.get(key) if isinstance(alloc, dict) else None
        for item in items[:64] if isinstance(items, list) else []:
            total += (_count(item.get("bytes")) or 0) if isinstance(item, dict) else 0
    return total


def _mine(jobs: list[dict[str, Any]], before: list[str]) -> dict[str, Any] | None:
    """The proof's job: the oldest job not listed before the proof was submitted (cuzk-bench
    chooses its id; cuzk registers jobs in the order they came)."""
    new = [j for j in jobs if j["id"] not in set(before)]
    return max(new, key=lambda j: -1.0 if j["age"] is None else j["age"]) if new else None


def budget_waiting(doc: Any, before: list[str], partition: int) -> dict[str, Any] | None:
    """What /status shows when the proof's job (see _mine) waits in cuzk's budget acquire;
    None when it does not, or nothing is known. It waits when it has a partition pending,
    none holding a reservation, and the budget's available bytes cannot hold one partition
    (`partition`: the kind's figure). `releasable`: another job holds a partition, or the
    budget holds more than the SRS and PCE allocations (a reservation that ends, such as
    cuzk's PCE extraction); else nothing will ever free room."""
    memory = doc.get("memory") if isinstance(doc, dict) else None
    memory = memory if isinstance(memory, dict) else {}
    total, used, available = (_count(memory.get(k)) for k in (
        "total_bytes", "used_bytes", "available_bytes"))
    jobs = _jobs(doc)
    mine = _mine(jobs, before)
    if mine is None or total is None or used is None or available is None or partition <= 0:
        return None
    if not mine["pending"] or mine["active"] or available >= partition:
        return None
    others = [j for j in jobs if j["id"] != mine["id"] and j["active"]]
    pinned = _pinned(doc)
    return {"job": mine, "others": others, "total": total, "used": used,
            "available": available, "pinned": pinned, "partition": partition,
            "releasable": bool(others) or used > pinned}


def _run_watched(argv: list[str], kill_after: float, status_url: str,
                 watch: dict[str, Any]) -> tuple[int, bytes, bytes, dict[str, Any] | None]:
    """Run `argv` in a process group of its own, reading /status every BUDGET_POLL s. Once
    the proof's job has been seen waiting for budget BUDGET_SETTLE times, and for
    watch["wait"] s where something could release room (at once where nothing could), the
    group is stopped as timeout stops it. The wait counts from its first sight until the
    job holds or finishes a partition. Returns (exit, stdout, stderr, what /status showed
    when it was stopped, or None)."""
    import subprocess

    partition, limit = int(watch.get("partition") or 0), float(watch.get("wait") or 0)
    before = job_ids(_status_doc(status_url))
    proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, start_new_session=True)
    since, looks = 0.0, 0
    while True:
        try:
            out, err = proc.communicate(timeout=BUDGET_POLL)
            return proc.returncode, out, err, None
        except subprocess.TimeoutExpired:
            pass
        doc = _status_doc(status_url)
        seen = budget_waiting(doc, before, partition)
        if seen is None:
            mine = _mine(_jobs(doc), before)
            if mine is None or mine["active"] or mine["done"]:
                looks = 0  # no job of the proof's yet, or it moves: no wait
            continue
        since, looks = (since if looks else time.monotonic()), looks + 1
        waited = time.monotonic() - since
        if looks >= BUDGET_SETTLE and waited >= (limit if seen["releasable"] else 0):
            break
    _stop_group(proc, kill_after)
    out, err = proc.communicate()
    seen.update(waited=round(waited, 1), limit=limit)
    return proc.returncode, out, err, seen


def _stop_group(proc: Any, kill_after: float) -> None:
    """Stop the proof's whole process group as timeout does: TERM, and KILL once the leader
    ended or kill_after s passed (a child left in the group goes too)."""
    import contextlib
    import subprocess

    for sig in (signals.SIGTERM, signals.SIGKILL):
        try:
            os.killpg(proc.pid, sig)
        except OSError:
            return
        if sig == signals.SIGTERM:
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=kill_after)


# ---------------------------------------------------------------- prune


def _remove_tree(where: str) -> None:
    """Remove a folder (a link there: the link itself, never its target)."""
    import shutil

    if os.path.islink(where) or not os.path.isdir(where):
        safe_remove(where)
    else:
        shutil.rmtree(where)


def prune(root: str, releases: list[str], keep: list[str] | None = None) -> dict[str, Any]:
    """Remove the named release folders; never what current points at, one in `keep`, a
    name that is not a release id, or a link (a link is removed, never followed). A folder
    that could not be removed: "failed", named with why."""
    protected = set(keep or []) | {current_release(root) or ""}
    removed, kept, failed = [], [], []
    for release in releases:
        where = os.path.join(root, "releases", release)
        if not _release_id_ok(release) or release in protected:
            kept.append(release)
            continue
        if not os.path.lexists(where):
            continue
        try:
            _remove_tree(where)
        except OSError as e:
            failed.append(f"{release}: {e.strerror or e}")
            continue
        removed.append(release)
    if failed:
        return _report("failed", f"could not remove {'; '.join(failed)[:300]}",
                       removed=removed, kept=kept)
    if not removed:
        return _report("none", "no release to remove", kept=kept)
    return _report("pruned", f"removed {len(removed)} release(s)", removed=removed, kept=kept)


def remove_partial(root: str, name: str) -> dict[str, Any]:
    """Remove an upload's unfinished folder <root>/releases/.partial-*: only such a name."""
    if not name.startswith(".partial-") or "/" in name or name in (".partial-",):
        return _report("refused", f"not an upload's partial folder: {name[:80]!r}")
    where = os.path.join(root, "releases", name)
    if not os.path.lexists(where):
        return _report("none", f"no {name} to remove")
    _remove_tree(where)
    return _report("removed", f"removed {name}")


# ---------------------------------------------------------------- what the steps read and tidy


def _read_at_most(path: str, limit: int) -> bytes | None:
    """The first `limit` bytes of a regular file (never through a link), None if none."""
    fd = _open_read(path)
    if fd is None:
        return None
    with os.fdopen(fd, "rb") as f:
        return f.read(limit)


def pointed(root: str) -> dict[str, Any]:
    """The release current points at and the one recorded as before it (each: a release
    id, or None)."""
    now = current_release(root)
    text = (_read_at_most(os.path.join(_state_dir(root), "previous_release"), 256) or b"")
    before = text.decode("utf-8", "replace").strip()
    previous = before if _release_id_ok(before) else None
    return _report("pointed" if now else "none", f"current: {now or 'none'}", current=now,
                   previous=previous)


def log_tail(root: str, lines: int = 20, max_bytes: int = 65536) -> dict[str, Any]:
    """The last `lines` lines (of at most `max_bytes`) of <root>/rollout/daemon.log."""
    fd = _open_read(os.path.join(_state_dir(root), "daemon.log"))
    if fd is None:
        return _report("none", "no daemon log", text="")
    with os.fdopen(fd, "rb") as f:
        f.seek(max(0, os.fstat(f.fileno()).st_size - max(1, max_bytes)))
        data = f.read(max_bytes)
    kept = data.decode("utf-8", "replace").splitlines()[-max(1, min(lines, 1000)):]
    return _report("read", f"{len(kept)} line(s) of the daemon log",
                   text="".join(f"{line}\n" for line in kept))


def make_folder(path: str, link_ok: bool = False) -> dict[str, Any]:
    """Make the folder `path` and its missing parents (a link in its place is refused;
    link_ok: a link to a folder is that folder, as fetch.py takes param_cache on a disk of
    its own)."""
    if os.path.isdir(path) and (link_ok or not os.path.islink(path)):
        return _report("kept", f"{path} already there")
    try:
        safe_mkdir(path)
    except OSError as e:
        return _report("refused", f"{path}: {e}")
    return _report("made", f"made {path}")


def config_folders(config_path: str, param_cache: str) -> dict[str, Any]:
    """The config step's folders: the config's (a link there refused) and param_cache (a
    link to a folder taken as it, as make_folder's link_ok), each made where missing; and
    the config's kept copies (<name>.for-*: regular files, never through a link) private."""
    folder, name = os.path.split(config_path.rstrip("/"))
    made = [make_folder(folder or "."), make_folder(param_cache, link_ok=True)]
    refused = [m["reason"] for m in made if m["outcome"] == "refused"]
    if refused:
        return _report("refused", "; ".join(refused)[:400])
    private = 0
    with os.scandir(folder or ".") as entries:
        for entry in entries:
            if entry.name.startswith(f"{name}.for-") and entry.is_file(follow_symlinks=False):
                os.chmod(entry.path, 0o600, follow_symlinks=False)
                private += 1
    word = "made" if any(m["outcome"] == "made" for m in made) else "kept"
    return _report(word, f"{folder} and {param_cache} there; {private} kept config(s) private")


def remove_files(paths: list[str]) -> dict[str, Any]:
    """Remove each file (a link: the link itself, never its target); a missing one is
    fine, a folder is refused ("failed", named)."""
    removed, failed = [], []
    for path in [p for p in paths if isinstance(p, str)][:MAX_NAMES]:
        try:
            if safe_remove(path):
                removed.append(path)
        except OSError as e:
            failed.append(f"{path}: {e.strerror or e}")
    if failed:
        return _report("failed", f"could not remove {'; '.join(failed)[:300]}", removed=removed)
    return _report("removed" if removed else "none", f"removed {len(removed)} file(s)",
                   removed=removed)


# ---------------------------------------------------------------- a release's files
# The upload, the pull and staging ahead put a release's executables in a folder of their
# own, then install it under the release's name; the switch and a release read back check
# them. An executable is named by a plain file name (hostile: never a path).

MAX_NAMES = 64  # executables (or files) named in one call


def _names(names: Any) -> list[str]:
    """The plain file names among `names`: no "/", ".", ".." or NUL; at most MAX_NAMES."""
    items = names if isinstance(names, list) else []
    return [n for n in items[:MAX_NAMES] if isinstance(n, str) and n not in ("", ".", "..")
            and "/" not in n and "\0" not in n]


def _identity(path: str) -> str | None:
    """What identifies a regular file without reading it: size, inode, device, and the
    modification and change times in ns (any write, truncate, chmod or replacement moves the
    change time, which no user can set back). None: missing, a link, not a regular file."""
    try:
        st = os.lstat(path)
    except OSError:
        return None
    if not stat.S_ISREG(st.st_mode):
        return None
    return f"{st.st_size} {st.st_ino} {st.st_dev} {st.st_mtime_ns} {st.st_ctime_ns}"


def _evict(path: str) -> None:
    """Write a file back and drop its pages from the page cache (best effort): read twice,
    a release's pages are active file cache charged to the container, which the drain
    would count in the working set."""
    fd = _open_read(path)
    if fd is None:
        return
    try:
        os.fsync(fd)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    except (OSError, AttributeError):
        pass
    finally:
        os.close(fd)


def identities(directory: str, names: list[str], evict: bool = False) -> dict[str, Any]:
    """Each file's identity (_identity; None for one that is not a regular file there);
    evict: each written back and evicted from the page cache first."""
    if os.path.islink(directory):
        return _report("refused", f"{directory} is a symbolic link", identities={})
    found = {}
    for name in _names(names):
        if evict:
            _evict(os.path.join(directory, name))
        found[name] = _identity(os.path.join(directory, name))
    return _report("read", f"{len(found)} identities read", identities=found)


def file_sums(directory: str, names: list[str], mode: int | None = None) -> dict[str, Any]:
    """Each file's sha256 (None: missing, a link, not a regular file), made `mode` first
    where given, evicted from the page cache once read."""
    sums: dict[str, str | None] = {}
    for name in _names(names):
        path = os.path.join(directory, name)
        fd = _open_read(path) if mode is not None else None
        if fd is not None:
            try:
                os.fchmod(fd, mode or 0)
            finally:
                os.close(fd)
        sums[name] = _sha256_of(path)
        _evict(path)
    return _report("read", f"{len(sums)} file(s) hashed", sums=sums)


def read_release(root: str, release: str) -> dict[str, Any]:
    """releases/RELEASE/RELEASE.json (its text, at most 1 MiB, never through a link) and the
    sha256 of each executable it lists (file_sums), in one call; "missing": no manifest."""
    if not _release_id_ok(release):
        return _report("refused", f"not a release id: {release[:80]!r}")
    where = os.path.join(root, "releases", release)
    data = _read_at_most(os.path.join(where, "RELEASE.json"), 1 << 20)
    if data is None:
        return _report("missing", f"release {release} is not on the host")
    try:
        listed = json.loads(data).get("artifacts")
    except (ValueError, AttributeError):
        listed = None
    names = list(listed) if isinstance(listed, dict) else []
    return _report("read", f"release {release}'s manifest read",
                   manifest=data.decode("utf-8", "replace"), sums=file_sums(where, names)["sums"])


def _staging_root(root: str) -> str:
    return os.path.join(_state_dir(root), "staging")


def _tidy(where: str) -> None:
    """Remove the folder `where` if it is empty (never a link)."""
    if os.path.isdir(where) and not os.path.islink(where):
        with contextlib.suppress(OSError):
            os.rmdir(where)


def install_release(root: str, release: str, partial: str, manifest: str, names: list[str],
                    expect: dict[str, str] | None = None) -> dict[str, Any]:
    """Install the folder `partial` as releases/RELEASE: where the identities `expect` (the
    files as staged) no longer hold, "changed" and `partial` is removed; else RELEASE.json
    (`manifest`) is written there, the files written back and evicted from the page cache,
    an old releases/RELEASE removed (a link there: the link itself) and `partial` renamed in
    its place ("installed", with the new identities). A staging folder left empty goes."""
    if not _release_id_ok(release):
        return _report("refused", f"not a release id: {release[:80]!r}")
    if os.path.islink(partial) or not os.path.isdir(partial):
        return _report("missing", f"no folder {partial} to install")
    files, dest = _names(names), os.path.join(root, "releases", release)
    try:
        if expect is not None and any(
                _identity(os.path.join(partial, n)) != expect.get(n) for n in files):
            _remove_tree(partial)
            _tidy(_staging_root(root))
            return _report("changed", f"{partial} changed since it was staged: removed")
        safe_write(os.path.join(partial, "RELEASE.json"), manifest.encode(), 0o644)
        for name in files:
            _evict(os.path.join(partial, name))
        if os.path.lexists(dest):
            _remove_tree(dest)
        os.rename(partial, dest)
    except OSError as e:
        return _report("failed", f"release {release} not installed: {e}")
    _tidy(_staging_root(root))
    return _report("installed", f"installed release {release}",
                   identities={n: _identity(os.path.join(dest, n)) for n in files})


def _staging_links(root: str) -> list[str]:
    """rollout/ and its staging folder, where either is a link (nothing is removed there)."""
    return [p for p in (_state_dir(root), _staging_root(root)) if os.path.islink(p)]


def _clear_staging(root: str, release: str) -> list[str]:
    """Remove the staging of other releases (named, at most 20) and RELEASE's own."""
    stale: list[str] = []
    where = _staging_root(root)
    if os.path.isdir(where):
        for name in sorted(os.listdir(where)):
            if name != release:
                _remove_tree(os.path.join(where, name))
                stale.append(name[:80])
    if os.path.lexists(os.path.join(where, release)):
        _remove_tree(os.path.join(where, release))
    return stale[:20]


def staging_survey(root: str, release: str, names: list[str]) -> dict[str, Any]:
    """Before staging RELEASE ahead: the folders that are links (rollout/, its staging
    folder, releases/: then nothing is removed), stale staging cleared (_clear_staging),
    whether the release is on the host already (its RELEASE.json and each of `names`), and
    whether releases/ and rollout/ share a device (a rename must not become a copy)."""
    if not _release_id_ok(release):
        return _report("refused", f"not a release id: {release[:80]!r}")
    releases = os.path.join(root, "releases")
    links = [p for p in (_state_dir(root), _staging_root(root), releases)
             if os.path.islink(p)]
    stale: list[str] = []
    if not _staging_links(root):
        with contextlib.suppress(OSError):
            stale = _clear_staging(root, release)
    dest = os.path.join(releases, release)
    present = os.path.isfile(os.path.join(dest, "RELEASE.json")) and all(
        os.path.lexists(os.path.join(dest, n)) for n in _names(names))
    try:
        same = os.lstat(releases).st_dev == os.lstat(_state_dir(root)).st_dev
    except OSError:
        same = False
    return _report("surveyed", f"{len(stale)} stale staging folder(s) removed", links=links,
                   stale=stale, present=present, same_device=same)


def unstage(root: str, release: str) -> dict[str, Any]:
    """Remove the staging of RELEASE, and the staging folder if it is then empty; nothing
    where rollout/ or its staging folder is a link ("refused")."""
    if not _release_id_ok(release):
        return _report("refused", f"not a release id: {release[:80]!r}")
    links = _staging_links(root)
    if links:
        return _report("refused", f"{links[0]} is a symbolic link: nothing removed")
    where = os.path.join(_staging_root(root), release)
    if not os.path.lexists(where):
        _tidy(_staging_root(root))
        return _report("none", f"nothing staged for {release}")
    _remove_tree(where)
    _tidy(_staging_root(root))
    return _report("removed", f"removed the staging of {release}")


def pull_folder(root: str, name: str) -> dict[str, Any]:
    """Make releases/NAME (a pull's partial folder, `.partial-*-pull`) for a download into
    it, kept as it is to resume; every other pull's partial folder there is abandoned
    (removed: the host lock makes this the only pull)."""
    if not (name.startswith(".partial-") and name.endswith("-pull")) or "/" in name:
        return _report("refused", f"not a pull's partial folder: {name[:80]!r}")
    releases = os.path.join(root, "releases")
    if os.path.isdir(releases) and not os.path.islink(releases):
        for other in os.listdir(releases):
            if other != name and other.startswith(".partial-") and other.endswith("-pull"):
                with contextlib.suppress(OSError):
                    _remove_tree(os.path.join(releases, other))
    return make_folder(os.path.join(releases, name))


def _sha256_of(path: str) -> str | None:
    """The sha256 of a regular file (never read through a link), None if there is none."""
    import hashlib

    fd = _open_read(path)
    if fd is None:
        return None
    digest = hashlib.sha256()
    with os.fdopen(fd, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def input_check(path: str, size: int | None = None) -> dict[str, Any]:
    """The validation input's size and, where that is right (or no size is set), its
    sha256: present, missing (or not a regular file: a link is not read), wrong-size."""
    fd = _open_read(path)
    if fd is None:
        return _report("missing", f"{path} missing", size=None, sha256=None)
    with os.fdopen(fd, "rb") as f:
        have = os.fstat(f.fileno()).st_size
    if size is not None and have != size:
        return _report("wrong-size", f"{path} is {have} bytes, not {size}", size=have,
                       sha256=None)
    return _report("present", f"{path} present", size=have, sha256=_sha256_of(path))


def probe(input_path: str, input_size: int | None = None, status_url: str = "",
          ports: list[int] | None = None, pid: int | None = None) -> dict[str, Any]:
    """What validate reads before the proof, in one call: the input (input_check), the
    status port's answer (None when off or silent) and who holds the daemon's ports."""
    found = input_check(input_path, input_size)
    answer = _status_answer(status_url, 5.0) if status_url else None
    held = owners(ports, pid) if ports else None
    return _report("probed", found["reason"], input=found, status=answer, owners=held)


def stage_input(partial: str, path: str, sha256: str) -> dict[str, Any]:
    """Put an uploaded input (`partial`) in place at `path` where its sha256 is `sha256`
    (a rename: a link at `path` is replaced, never written through); else remove it."""
    have = _sha256_of(partial)
    if have is None:
        return _report("missing", f"{partial} missing")
    if have != sha256:
        safe_remove(partial)
        return _report("mismatch", f"sha256 {have[:12]} is not {sha256[:64]}")
    folder = os.path.dirname(path) or "."
    if os.path.islink(folder) or os.path.dirname(partial) != os.path.dirname(path):
        safe_remove(partial)
        return _report("refused", f"{folder} is a link, or {partial} is not beside {path}")
    os.replace(partial, path)
    return _report("staged", f"staged {path}")


# ---------------------------------------------------------------- what preflight reads


def cpu_info(path: str = "/proc/cpuinfo") -> dict[str, Any]:
    """The first CPU's flags line of /proc/cpuinfo ("flags" on x86, "Features" on arm)."""
    for line in (read_text(path) or "").splitlines():
        if line.startswith(("flags", "Features")):
            return _report("read", "the first CPU's flags", text=line[:8192])
    return _report("none", f"no flags line in {path}", text="")


def gpus(timeout: float = 60.0) -> dict[str, Any]:
    """What `nvidia-smi --query-gpu=index,name --format=csv,noheader` says (its output and
    errors together, as data) and its exit code: 127 where there is no nvidia-smi."""
    import subprocess

    argv = ["nvidia-smi", "--query-gpu=index,name", "--format=csv,noheader"]
    try:
        r = subprocess.run(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT, timeout=timeout, check=False)
    except FileNotFoundError:
        return _report("failed", "no nvidia-smi", exit=127, output="nvidia-smi: not found")
    except subprocess.TimeoutExpired:
        return _report("timeout", f"nvidia-smi did not end within {timeout:g}s", exit=124,
                       output=f"nvidia-smi did not end within {timeout:g}s")
    word = "ran" if r.returncode == 0 else "failed"
    return _report(word, f"nvidia-smi exited {r.returncode}", exit=r.returncode,
                   output=r.stdout.decode("utf-8", "replace")[-8192:])


def ldd(directory: str, names: list[str]) -> dict[str, Any]:
    """Each executable's `LC_ALL=C ldd` output (its errors too): "missing" where the release
    folder is not there (or is a link), "no-ldd" where the host has no ldd."""
    import shutil
    import subprocess

    if os.path.islink(directory) or not os.path.isdir(directory):
        return _report("missing", f"{directory} is not on the host", outputs={})
    if not shutil.which("ldd"):
        return _report("no-ldd", "no ldd on the host", outputs={})
    env = {**os.environ, "LC_ALL": "C"}
    outputs = {}
    for name in _names(names):
        try:
            r = subprocess.run(["ldd", "--", os.path.join(directory, name)], env=env,
                               stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                               stderr=subprocess.STDOUT, timeout=60, check=False)
        except subprocess.TimeoutExpired:
            outputs[name] = "ldd did not end within 60s"
            continue
        outputs[name] = r.stdout.decode("utf-8", "replace")[-8192:]
    return _report("read", f"ldd of {len(outputs)} executable(s)", outputs=outputs)


def file_present(path: str) -> dict[str, Any]:
    """Whether `path` is a regular file (as `test -f` says: a link to one counts)."""
    word = "present" if os.path.isfile(path) else "missing"
    return _report(word, f"{path} {word}")


def _nearest_free(folder: str) -> int:
    """Free bytes where `folder` is, or would be: its nearest existing folder."""
    where = folder
    while not os.path.isdir(where) and where not in ("", "/"):
        where = os.path.dirname(where)
    st = os.statvfs(where or "/")
    return st.f_bavail * st.f_frsize


def _size(path: str) -> int | None:
    try:
        return os.stat(path).st_size
    except OSError:
        return None


def params_probe(cache: str, pce: str, names: list[str], reuse: list[str]) -> dict[str, Any]:
    """The params manifest's files: their sizes in param_cache (through links), their
    .partial sizes, the reuse folder holding each (and $FIL_PROOFS_PARAMETER_CACHE), whether
    the PCE file is there, and the free bytes where param_cache is."""
    env = os.environ.get("FIL_PROOFS_PARAMETER_CACHE", "")
    folders = [str(d) for d in reuse if isinstance(d, str)] + ([env] if env.startswith("/")
                                                               else [])
    wanted = _names(names)

    def elsewhere(name: str) -> str | None:
        return next((d for d in folders if os.path.isfile(os.path.join(d, name))), None)

    return _report(
        "probed", f"{len(wanted)} param file(s) looked for in {cache}",
        sizes={n: _size(os.path.join(cache, n)) for n in wanted},
        partial={n: _size(os.path.join(cache, n + ".partial")) for n in wanted},
        reuse={n: elsewhere(n) for n in wanted},
        pce=_size(os.path.join(cache, os.path.basename(pce))) is not None,
        free=_nearest_free(cache))


def pce_sizes(cache: str, names: list[str]) -> dict[str, Any]:
    """The PCE file and its temporary in param_cache (regular files only: lstat, never
    through a link: a link's size says nothing of what cuzk writes), and the free bytes
    where param_cache is."""

    def file(name: str) -> dict[str, int] | None:
        try:
            st = os.lstat(os.path.join(cache, name))
        except OSError:
            return None
        if not stat.S_ISREG(st.st_mode):
            return None
        return {"size": st.st_size, "blocks": st.st_blocks * 512}

    wanted = _names(names)
    return _report("probed", f"{len(wanted)} PCE file(s) looked for in {cache}",
                   files={n: file(n) for n in wanted}, free=_nearest_free(cache))


def c1_probe(path: str, limit: int) -> dict[str, Any]:
    """The C1 at `path` (a regular file, never through a link, at most `limit` bytes): its
    SectorNum, and of its Phase1Out only what the replica id check reads, as a small C1 of
    the same shape ("read", c1); "missing" or "odd" (not a regular file, too large)."""
    import base64

    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError as e:
        return _report("missing", f"{path}: {e.strerror}", missing=e.strerror)
    with os.fdopen(fd, "rb") as f:
        st = os.fstat(f.fileno())
        if not stat.S_ISREG(st.st_mode) or st.st_size > limit:
            odd = "not a regular file" if not stat.S_ISREG(st.st_mode) else f"{st.st_size} bytes"
            return _report("odd", f"{path}: {odd}", odd=odd)
        data = f.read(limit + 1)
    try:
        doc: Any = json.loads(data)
    except (ValueError, RecursionError):
        return _report("odd", f"{path}: not JSON", odd="not JSON")
    with contextlib.suppress(Exception):  # hostile bytes: Phase1Out kept as it is
        inner = json.loads(base64.b64decode(doc["Phase1Out"]))
        keep = {k: inner.get(k) for k in ("registered_proof", "ticket", "comm_d", "replica_id")}
        doc["Phase1Out"] = base64.b64encode(json.dumps(keep).encode()).decode()
    small = {k: doc.get(k) for k in ("SectorNum", "Phase1Out")} if isinstance(doc, dict) else {}
    return _report("read", f"{path} read", c1=small)


# ---------------------------------------------------------------- several reads, one round trip


def batch(calls: list[Any]) -> dict[str, Any]:
    """Several host actions in one round trip, in order (the reads a step makes together,
    such as preflight's): each one's report, or None for an entry that is not a call or
    whose action raised (the controller then makes that call on its own)."""
    reports: list[Any] = []
    for entry in calls if isinstance(calls, list) else []:
        name = entry.get("call") if isinstance(entry, dict) else None
        if not isinstance(name, str) or name == "batch":
            reports.append(None)
            continue
        try:
            reports.append(call(name, entry.get("kwargs")))
        except Exception:  # noqa: BLE001 - that call alone, made again on its own
            reports.append(None)
    return _report("batch", f"{len(reports)} call(s)", reports=reports)


# ---------------------------------------------------------------- start-up registration

UNIT = """[Unit]
Description=rollout's supervisor of the cuzk daemon
After=network.target

[Service]
Type=forking
ExecStart={start}

[Install]
WantedBy=multi-user.target
"""


def _start_line(root: str) -> tuple[str, str]:
    """(the command that starts the supervisor at boot, the mark that names its line)."""
    import shlex

    supervisor = os.path.join(_state_dir(root), "supervisor.py")
    start = f"python3 {shlex.quote(supervisor)} --root {shlex.quote(root)} --daemonize"
    return start, f"# rollout-supervisor {root}"


def _register_onstart(path: str, line: str, mark: str) -> str:
    """Append `line` to the on-start script once (made a script where missing); never
    written through a link."""
    if os.path.islink(path):
        raise OSError(f"{path} is a symbolic link: rollout never writes through a link")
    text = (_read_at_most(path, 1 << 20) or b"").decode("utf-8", "replace")
    if mark not in text:
        safe_append(path, ("" if text else "#!/bin/sh\n") + line + "\n", 0o755)
    fd = safe_open(path, os.O_RDONLY)
    try:
        os.fchmod(fd, os.fstat(fd).st_mode | 0o111)
    finally:
        os.close(fd)
    return f"on-start script {path}"


def _register_cron(line: str, mark: str) -> str | None:
    import shutil
    import subprocess

    if not shutil.which("crontab"):
        return None
    now = subprocess.run(["crontab", "-l"], capture_output=True, check=False)
    kept = [x for x in now.stdout.decode("utf-8", "replace").splitlines() if mark not in x]
    table = "".join(f"{x}\n" for x in [*kept, f"@reboot {line}"])
    done = subprocess.run(["crontab", "-"], input=table.encode(), capture_output=True,
                          check=False)
    return "cron @reboot" if done.returncode == 0 else None


def _register_systemd(start: str, unit_path: str) -> str | None:
    import subprocess

    if (read_text("/proc/1/comm") or "").strip() != "systemd":
        return None
    safe_write(unit_path, UNIT.format(start=start).encode(), 0o644)
    for argv in (["systemctl", "daemon-reload"],
                 ["systemctl", "enable", os.path.basename(unit_path)]):
        if subprocess.run(argv, capture_output=True, check=False).returncode != 0:
            return None
    return f"systemd unit {os.path.basename(unit_path)}"


def register(root: str, onstart: str = "",
             unit_path: str = "/etc/systemd/system/rollout-supervisor.service"
             ) -> dict[str, Any]:
    """Register the supervisor with the host's start-up mechanism, so that a container
    restart brings it back: the on-start script `onstart` names (vast.ai runs it at every
    container start), else an @reboot cron entry, else a systemd unit where systemd is PID
    1. Records the method in <root>/rollout/registered; "none" where there is none."""
    if any(c in root + onstart for c in "\n\r\0"):
        return _report("refused", "a root or on-start path with a line break: refused",
                       how="none")
    start, mark = _start_line(root)
    line = f"{start} {mark}"
    try:
        how = (_register_onstart(onstart, line, mark) if onstart
               else _register_cron(line, mark) or _register_systemd(start, unit_path))
    except OSError as e:
        return _report("refused", f"start-up registration: {e}", how="none")
    safe_mkdir(_state_dir(root))
    safe_write(os.path.join(_state_dir(root), "registered"), f"{how or 'none'}\n".encode(),
               0o644)
    return _report("registered" if how else "none", how or "no start-up mechanism found",
                   how=how or "none")


def forget_validated(root: str) -> dict[str, Any]:
    """Remove the validation evidence <root>/rollout/validated.json (a failed proof)."""
    if safe_remove(os.path.join(_state_dir(root), "validated.json")):
        return _report("removed", "validation evidence removed")
    return _report("none", "no validation evidence")


# ---------------------------------------------------------------- work in flight and the cordon
# (issue 17: a busy prover). The controller polls `work` before the stop; `cordon` and
# `uncordon` run the user's own commands (curio cordon / curio uncordon) through
# `user_command`, and keep "cordoned by run X" in <root>/rollout/cordoned.json.


def _age(value: Any) -> float | None:
    ok = _number(value) and 0 <= value < 1e12  # never NaN or infinite
    return round(float(value), 3) if ok else None


def _job_id(value: Any) -> str:
    ok = isinstance(value, (str, int)) and not isinstance(value, bool)
    return str(value)[:128] if ok else "?"


def jobs_in_flight(doc: Any) -> dict[str, Any]:
    """The work cuzk's /status shows (hostile data, read with its types checked): each job
    in flight, {"kind", "id", "age"} (seconds), from `pipelines` (a pipeline whose
    partitions are not all done and none failed) and `gpu_workers[].current_job`; the
    queue's depth (counters.queue_depth). "idle": no job and an empty queue; "busy";
    "unknown": not cuzk's shape."""
    if not isinstance(doc, dict):
        return _report("unknown", "/status is not a JSON object", jobs=[], queue_depth=None)
    pipelines, workers = doc.get("pipelines"), doc.get("gpu_workers")
    counters: Any = doc.get("counters")
    depth: Any = counters.get("queue_depth") if isinstance(counters, dict) else None
    queue = int(depth) if _number(depth) and depth >= 0 else None
    if not isinstance(pipelines, list) and not isinstance(workers, list) and queue is None:
        return _report("unknown", "/status shows no pipelines, gpu_workers or queue_depth",
                       jobs=[], queue_depth=None)
    jobs = {j["id"]: {k: j[k] for k in ("id", "kind", "age")}
            for j in _jobs(doc) if not j["ended"]}
    for w in workers if isinstance(workers, list) else []:
        current = w.get("current_job") if isinstance(w, dict) else None
        if current is not None and _job_id(current) not in jobs:
            job = _job_id(current)
            jobs[job] = {"id": job, "kind": "?", "age": _age(w.get("busy_secs"))}
    found = sorted(jobs.values(), key=lambda j: j["id"])[:50]
    if not found and not queue:
        return _report("idle", "no job in flight, queue empty", jobs=[], queue_depth=queue)
    return _report("busy", f"{len(jobs)} job(s) in flight, {queue or 0} queued", jobs=found,
                   queue_depth=queue)


def work(status_url: str) -> dict[str, Any]:
    """What the daemon is working on now, from its /status (jobs_in_flight); "no-answer"
    when the status port does not answer (no daemon: nothing can be in flight)."""
    answer = _status_answer(status_url) if status_url else None
    if answer is None:
        return _report("no-answer", f"{status_url or 'no status port'} did not answer",
                       jobs=[], queue_depth=None)
    try:
        doc = json.loads(answer)
    except ValueError:
        doc = None
    return jobs_in_flight(doc)


def user_command(command: str, timeout: float = 60.0) -> dict[str, Any]:
    """Run one of the user's own commands (cordon, uncordon: rendered and quoted on the
    controller as the validation command is) as `sh -c command` under `timeout`."""
    import subprocess

    if not command.strip():
        return _report("no-command", "no command to run")
    r = subprocess.run(["timeout", "-k", "5", f"{timeout:g}", "sh", "-c", command],
                       stdin=subprocess.DEVNULL, capture_output=True, check=False)
    code = 128 - r.returncode if r.returncode < 0 else r.returncode
    output = (r.stdout + r.stderr).decode("utf-8", "replace")[-2000:]
    if code in STOPPED:
        return _report("timeout", f"did not end within {timeout:g}s", exit=code, output=output)
    return _report("ran" if code == 0 else "failed", f"exited {code}", exit=code, output=output)


def _cordon_record(root: str) -> str:
    return os.path.join(_state_dir(root), "cordoned.json")


def cordoned(root: str) -> dict[str, Any]:
    """The record "cordoned by run X" (hostile data: what a host file says), if any."""
    try:
        doc = json.loads(read_text(_cordon_record(root)) or "null")
    except ValueError:
        doc = {"run": "?"}
    if not isinstance(doc, dict):
        return _report("none", "not cordoned by rollout", run=None)
    run = _job_id(doc.get("run"))
    return _report("cordoned", f"cordoned by run {run}", run=run, time=_age(doc.get("time")))


def cordon(root: str, run_id: str, command: str, timeout: float = 60.0,
           status_url: str = "") -> dict[str, Any]:
    """Record "cordoned by run RUN_ID" first (a host is never cordoned without the record
    that gets it uncordoned), then run the cordon command; once it ran, the wait's first
    look at the work in flight (`work`, ops.work's report) when `status_url` is given."""
    safe_mkdir(_state_dir(root))
    safe_write(_cordon_record(root), json.dumps({"run": run_id[:128], "time": time.time()},
                                                sort_keys=True).encode(), 0o644)
    out = user_command(command, timeout)
    word = "cordoned" if out["outcome"] == "ran" else out["outcome"]
    looked = {"work": work(status_url)} if word == "cordoned" and status_url else {}
    return {**out, "outcome": word, "reason": f"cordon command {out['reason']}", **looked}


def uncordon(root: str, command: str, timeout: float = 60.0) -> dict[str, Any]:
    """Run the uncordon command where rollout's record says it cordoned the host ("none":
    no record, nothing run); once it succeeded, remove the record."""
    if not os.path.lexists(_cordon_record(root)):
        return _report("none", "not cordoned by rollout: nothing to undo")
    out = user_command(command, timeout)
    if out["outcome"] != "ran":
        return {**out, "reason": f"uncordon command {out['reason']}: the record is kept"}
    removed = safe_remove(_cordon_record(root))
    return {**out, "outcome": "uncordoned", "reason": f"uncordon command {out['reason']}",
            "record_removed": removed}


ACTIONS = {f.__name__: f for f in (hold, release_hold, stop, drain, point_current,
                                   restore_config, run_supervisor, start, wait_ready, owners,
                                   prove, prune, work, user_command, cordoned, cordon,
                                   uncordon, remove_partial, pointed, log_tail, make_folder,
                                   forget_validated, input_check, probe, stage_input,
                                   register, config_folders, remove_files, identities,
                                   file_sums, read_release, install_release, staging_survey,
                                   unstage, pull_folder, cpu_info, gpus, ldd,
                                   file_present, params_probe, pce_sizes, c1_probe, batch)}


VAR_KEYWORDS = 0x08  # a code object's flag: the function takes **kwargs


def misfit(fn: Any, kwargs: dict[str, Any]) -> str | None:
    """Why these keyword arguments do not fit `fn` (None: they do), read from its code
    object as inspect's bind would say it: importing inspect costs a forked call 14 ms."""
    code = fn.__code__
    named = code.co_varnames[:code.co_argcount + code.co_kwonlyargcount]
    for name in kwargs:
        if name not in named and not code.co_flags & VAR_KEYWORDS:
            return f"got an unexpected keyword argument {name[:80]!r}"
    optional = code.co_varnames[code.co_argcount - len(fn.__defaults__ or ()):code.co_argcount]
    optional += tuple(fn.__kwdefaults__ or ())
    missing = [n for n in named if n not in optional and n not in kwargs]
    return f"missing a required argument: {missing[0]!r}" if missing else None


def call(action: str, kwargs: Any) -> dict[str, Any]:
    """Run one action; an unknown action or arguments that do not fit it: "bad-call"."""
    fn = ACTIONS.get(action)
    if fn is None:
        return _report("bad-call", f"no host action {action[:80]!r}")
    if not isinstance(kwargs, dict) or not all(isinstance(k, str) for k in kwargs):
        return _report("bad-call", "keyword arguments must be a JSON object")
    why = misfit(fn, kwargs)
    if why is not None:
        return _report("bad-call", f"{action}: {why}")
    report: dict[str, Any] = fn(**kwargs)
    return report


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(description="run one host action (rollout's host API)")
    p.add_argument("--call", required=True, choices=sorted(ACTIONS))
    p.add_argument("--kwargs", default=None, help="its keyword arguments, a JSON object")
    p.add_argument("--kwargs-stdin", action="store_true", help="read them from stdin")
    args = p.parse_args(argv)
    text = sys.stdin.read() if args.kwargs_stdin else (args.kwargs or "{}")
    try:
        kwargs = json.loads(text or "{}")
    except ValueError:
        kwargs = None
    print(json.dumps(call(args.call, kwargs), sort_keys=True, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
