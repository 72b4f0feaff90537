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
from rollout.host.scripts.common import distrust_daemon, proc_state, read_pidfile  # inlined on hosts
# isort: on


def daemon_state(proc: str, root: str, pid: int, starttime: int, exe: str) -> str:
    """running, zombie or gone: a pid that is no longer our daemon (reused) is gone."""
    state = proc_state(proc, pid, starttime)[0]
    if state != "running":
        return state
    return "gone" if distrust_daemon(proc, root, pid, starttime, exe) else "running"


def wait_dead(args: argparse.Namespace, pid: int, starttime: int, exe: str,
              seconds: float) -> str:
    end = time.monotonic() + seconds
    state = daemon_state(args.proc, args.root, pid, starttime, exe)
    while state == "running" and time.monotonic() < end:
        time.sleep(0.1)
        state = daemon_state(args.proc, args.root, pid, starttime, exe)
    return state


def stop(args: argparse.Namespace) -> dict[str, Any]:
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


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--root", default="/data")
    p.add_argument("--proc", default="/proc")
    p.add_argument("--signal", default="SIGTERM")
    p.add_argument("--grace", type=float, default=10.0)
    args = p.parse_args(argv)
    result = stop(args)
    print(json.dumps(result))
    return 1 if result["outcome"] == "still-running" else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
