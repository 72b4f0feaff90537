"""Stop and hold: the hold the supervisor obeys, the stop of our daemon (or the adoption of
one it did not start) and the drain after it (its rule: actions/drain.py)."""

from __future__ import annotations

import json
import os
import signal as signals
import time
from typing import Any

# ruff: noqa: E501
# isort: off
from rollout.host.scripts.common import cgroup_memory, cuzk_processes, distrust_daemon, is_cuzk_daemon, proc_cmdline, proc_starttime, proc_state, read_pidfile, safe_append, safe_mkdir, safe_open, safe_remove  # inlined on hosts
from rollout.host.scripts.actions.base import POLL, _number, _report, _state_dir  # inlined on hosts
from rollout.host.scripts.actions.spec import action  # inlined on hosts
from rollout.host.scripts.actions.drain import DrainPaths, Figures, record, wait_drained  # inlined on hosts
from rollout.host.scripts.actions.work import arrived, cordoned, work  # inlined on hosts
# isort: on

# ---------------------------------------------------------------- the hold


@action("root:str", "", "kept set", in_agent=True)
def hold(root: str) -> dict[str, Any]:
    """Set the hold: the supervisor restarts no daemon while <root>/rollout/hold exists."""
    path = os.path.join(_state_dir(root), "hold")
    if os.path.lexists(path):
        return _report("kept", "hold already set")
    safe_mkdir(_state_dir(root))
    os.close(safe_open(path, os.O_WRONLY | os.O_CREAT, 0o644))
    return _report("set", "hold set")


@action("root:str", "", "released none", in_agent=True)
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


@action(
    "root:str signal:str grace:float set_hold:bool adopt_pid:int adopt_starttime:int? "
    "respawn_window:float keep_release:str? status_url:str bench:[str]? on_work:str "
    "known:[str]? proc:str",
    "pid:int starttime:int? exe:str adopted:bool parent:int? parent_cmdline:str cmdline:str "
    "signal:str signalled_at:float escalated:bool killed_at:float state:str died_at:float "
    "respawned:[int] held:bool named_pid:int note:str work:obj cordoned:bool",
    "kept stopped still-running respawned already-dead none untrusted busy", warms="http.client"
)
def stop(root: str, signal: str = "SIGTERM", grace: float = 10.0, set_hold: bool = True,
         adopt_pid: int = 0, adopt_starttime: int | None = None, respawn_window: float = 3.0,
         keep_release: str | None = None, status_url: str = "", bench: list[str] | None = None,
         on_work: str = "", known: list[str] | None = None, proc: str = "/proc"
         ) -> dict[str, Any]:
    """Set the hold (set_hold), then stop the daemon daemon.pid names, confirmed through
    /proc (never a pid that is not our daemon: "untrusted"), escalating to SIGKILL after
    `grace`; or the hand-started daemon adopt_pid (adopt). keep_release: a daemon of that
    release is kept ("kept"). `on_work`: first one look at the work in flight (ops.work on
    `status_url`, `bench`), reported as `work` with `cordoned` (rollout's cordon record):
    "wait" (the stop after its wait) signals nothing where work arrived since (arrived: a
    job not in `known`, the stuck ones it does not wait for): "busy", the hold not set;
    "abandon" (a rollback) stops all the same."""
    if keep_release:
        kept = serving(root, keep_release, proc)
        if kept:
            return _report("kept", f"daemon {kept[0]} runs release {keep_release}: kept",
                           pid=kept[0], starttime=kept[1])
    look = {"work": work(status_url, bench, proc),
            "cordoned": cordoned(root)["outcome"] == "cordoned"} if on_work else {}
    late = arrived(look["work"], known or []) if on_work == "wait" else None
    if late:
        return _report("busy", f"nothing signalled: {late}", **look)
    held = hold(root)["outcome"] == "set" if set_hold else False
    out = _stop(root, signal, grace, adopt_pid, adopt_starttime, respawn_window, proc)
    out["held"] = held
    return {**out, **look}


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


# ---------------------------------------------------------------- drain (actions/drain.py's rule)


def _dead_daemon(root: str, proc: str) -> tuple[int, int | None]:
    """(pid, start time) of the daemon daemon.pid names while it is a zombie (stopped, not
    yet reaped); (0, None) otherwise."""
    found = read_pidfile(os.path.join(_state_dir(root), "daemon.pid"))
    if found is None or found[1] is None or found[0] <= 1:
        return 0, None
    zombie = proc_state(proc, found[0], found[1])[0] == "zombie"
    return (found[0], found[1]) if zombie else (0, None)


@action(
    "root:str script:str? pid:int starttime:int? settings:obj? keep_release:str? proc:str",
    "pid:int starttime:int drained_by:str? state_at_start:str? state:str died_at:float? "
    "zombie_seen:bool zombie_secs:float reaped_at:float? zombie_note:str? "
    "memory_back_at:float? memory:obj working_set:int? page_cache:int? budget:int? "
    "baseline:int? plateau_secs:float flushed_dirty:int? plateau:float holders:obj? "
    "samples:list started:float ended:float",
    "kept drained deadline plateau"
)
def drain(root: str, script: str | None = None, pid: int = 0, starttime: int | None = None,
          settings: dict[str, Any] | None = None, keep_release: str | None = None,
          proc: str = "/proc") -> dict[str, Any]:
    """The drain's rule (actions/drain.py), run here: the stopped daemon (pid 0: the zombie
    daemon.pid names, if any) is gone and its memory back; recorded in drains.jsonl.
    `settings`: as the controller computed them (deadline, plateau, zombie_grace, budget).
    "kept" where a daemon of keep_release runs (nothing was stopped). `script`: ignored
    (the path of drain.py an older run's guard still passes)."""
    kept = serving(root, keep_release, proc) if keep_release else None
    if kept:
        return _report("kept", f"daemon {kept[0]} runs release {keep_release}: nothing was "
                       "stopped", pid=kept[0])
    if not pid:
        pid, starttime = _dead_daemon(root, proc)
    out = wait_drained(root, pid, starttime, drain_figures(settings), DrainPaths(proc=proc))
    record(root, out)
    return out


def drain_figures(settings: dict[str, Any] | None) -> Figures:
    """The drain's figures from the controller's settings; a missing or bad one: default."""
    given = settings if isinstance(settings, dict) else {}
    numbers = {k: float(given[k]) for k in ("deadline", "plateau", "zombie_grace")
               if _number(given.get(k))}
    budget = given.get("budget")
    whole = isinstance(budget, int) and not isinstance(budget, bool)
    return Figures(budget if whole else None, **numbers)


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
