"""Stop the daemon named by the pidfile, confirmed through /proc; escalate to SIGKILL.

Run on the host: python3 - --root /data --signal SIGTERM --grace 10 < stop.py
Prints one JSON object. Never matches processes by name, and never signals a pid that is not
our daemon: above 1, with the start time the pidfile recorded, running the recorded
executable under <root>/releases (outcome "untrusted" otherwise).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import time
from typing import Any

# ruff: noqa: E501
# isort: off
# ruff: noqa: E501
# isort: off
from rollout.host.scripts.common import cgroup_memory, cuzk_processes, distrust_daemon, is_cuzk_daemon, proc_cmdline, proc_starttime, proc_state, read_pidfile, safe_append, safe_mkdir  # inlined on hosts
# isort: on
# isort: on


def daemon_state(proc: str, root: str, pid: int, starttime: int, exe: str) -> str:
    """running, zombie or gone: a pid that is no longer our daemon (reused) is gone."""
    state = proc_state(proc, pid, starttime)[0]
    if state != "running":
        return state
    return "gone" if distrust_daemon(proc, root, pid, starttime, exe) else "running"


def adopted_state(proc: str, pid: int, starttime: int) -> str:
    """running, zombie or gone for a daemon being adopted: still a cuzk daemon at that start."""
    state = proc_state(proc, pid, starttime)[0]
    if state != "running":
        return state
    return "running" if is_cuzk_daemon(proc, pid) else "gone"


def wait_dead(args: argparse.Namespace, pid: int, starttime: int, exe: str,
              seconds: float) -> str:
    def state_now() -> str:
        if args.adopt_pid:
            return adopted_state(args.proc, pid, starttime)
        return daemon_state(args.proc, args.root, pid, starttime, exe)

    end = time.monotonic() + seconds
    state = state_now()
    while state == "running" and time.monotonic() < end:
        time.sleep(0.05)
        state = state_now()
    return state


def respawned(args: argparse.Namespace, parent: int | None, old: int) -> list[dict[str, Any]]:
    """New cuzk daemons whose parent is the adopted daemon's parent (a loop respawning it),
    watched for --respawn-window seconds after the stop."""
    if not parent or parent <= 1:
        return []
    end = time.monotonic() + args.respawn_window
    while True:
        found = [p for p in cuzk_processes(args.proc, None)
                 if p["ppid"] == parent and p["pid"] != old and p["state"] == "running"]
        if found or time.monotonic() >= end:
            return found
        time.sleep(0.05)


def adopt(args: argparse.Namespace) -> dict[str, Any]:
    """Stop a daemon rollout's supervisor did not start, named by pid and start time from
    fresh facts (never a pidfile): only while it is still a cuzk daemon at that start time."""
    pid, starttime = args.adopt_pid, args.adopt_starttime
    if pid <= 1 or proc_starttime(args.proc, pid) != starttime or not is_cuzk_daemon(args.proc, pid):
        return {"outcome": "already-dead", "pid": pid, "starttime": starttime, "state": "gone",
                "adopted": True}
    parent = proc_state(args.proc, pid, starttime)[1]
    out: dict[str, Any] = {"pid": pid, "starttime": starttime, "exe": "", "adopted": True,
                           "parent": parent, "parent_cmdline": " ".join(proc_cmdline(args.proc, parent or 0))[:300],
                           "cmdline": " ".join(proc_cmdline(args.proc, pid))[:300]}
    out.update(signal_and_wait(args, pid, starttime, ""))
    if out["outcome"] == "stopped":
        again = respawned(args, parent, pid)
        if again:
            out.update(outcome="respawned", respawned=[p["pid"] for p in again])
        record_adoption(args.root, out)
    return out


def record_adoption(root: str, out: dict[str, Any]) -> None:
    """An exit record for the adopted daemon, like the supervisor's for its own."""
    mem = cgroup_memory("/sys/fs/cgroup")
    rec = {"time": out.get("died_at"), "recorded": time.time(), "pid": out["pid"],
           "adopted": True, "adopted_by": "rollout stop", "cmdline": out.get("cmdline"),
           "signal": out.get("signal"), "exit_code": None, "held": True,
           "memory": {"usage": mem["usage"], "limit": mem["limit"], "source": mem["source"]},
           "oom": mem["oom"], "note": "a daemon rollout's supervisor did not start, adopted: "
           "stopped so that the supervisor's daemon replaces it"}
    try:
        safe_mkdir(f"{root}/rollout")
        safe_append(f"{root}/rollout/exits.jsonl", json.dumps(rec, sort_keys=True) + "\n", 0o644)
    except OSError:
        pass


def signal_and_wait(args: argparse.Namespace, pid: int, starttime: int, exe: str) -> dict[str, Any]:
    out: dict[str, Any] = {}
    sig = signal.Signals[args.signal]
    os.kill(pid, sig)
    out.update(signal=sig.name, signalled_at=time.time())
    state = wait_dead(args, pid, starttime, exe, args.grace)
    if state == "running":
        os.kill(pid, signal.SIGKILL)
        out.update(escalated=True, killed_at=time.time())
        state = wait_dead(args, pid, starttime, exe, 10)
    out.update(outcome="stopped" if state != "running" else "still-running", state=state,
               died_at=time.time())
    return out


def stop(args: argparse.Namespace) -> dict[str, Any]:
    if args.adopt_pid:
        return adopt(args)
    pidfile = read_pidfile(f"{args.root}/rollout/daemon.pid")
    pid, starttime, exe = pidfile if pidfile is not None else (0, None, "")
    if starttime is None:  # no pidfile, or one without a start time to confirm the pid by
        return {"outcome": "none", "note": "no daemon pidfile: nothing to stop"}
    state = proc_state(args.proc, pid, starttime)[0]
    if state != "running" and pid > 1:
        return {"pid": pid, "starttime": starttime, "exe": exe, "outcome": "already-dead",
                "state": state}
    distrust = distrust_daemon(args.proc, args.root, pid, starttime, exe)
    if distrust:  # never signal what a pidfile names unless it is our daemon
        return {"outcome": "untrusted", "named_pid": pid, "note": f"daemon.pid: {distrust}"}
    out: dict[str, Any] = {"pid": pid, "starttime": starttime, "exe": exe}
    out.update(signal_and_wait(args, pid, starttime, exe))
    return out


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--root", default="/data")
    p.add_argument("--proc", default="/proc")
    p.add_argument("--signal", default="SIGTERM")
    p.add_argument("--grace", type=float, default=10.0)
    p.add_argument("--adopt-pid", type=int, default=0,
                   help="stop this daemon the supervisor did not start (from fresh facts)")
    p.add_argument("--adopt-starttime", type=int, default=None)
    p.add_argument("--respawn-window", type=float, default=3.0,
                   help="seconds to watch for a respawn by the adopted daemon's parent")
    args = p.parse_args(argv)
    result = stop(args)
    print(json.dumps(result))
    return 1 if result["outcome"] == "still-running" else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
