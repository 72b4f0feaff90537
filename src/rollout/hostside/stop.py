"""Stop the daemon named by the pidfile, confirmed through /proc; escalate to SIGKILL.

Run on the host: python3 - --root /data --signal SIGTERM --grace 10 < stop.py
Prints one JSON object. Never matches processes by name.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import time
from typing import Any


def read_pidfile(path: str) -> tuple[int, int, str] | None:
    try:
        with open(path) as f:
            parts = f.read().split()
        return int(parts[0]), int(parts[1]), parts[2] if len(parts) > 2 else ""
    except (OSError, ValueError, IndexError):
        return None


def proc_state(proc: str, pid: int, starttime: int, exe: str) -> str:
    """running, zombie or gone: a reused pid (other start time or command) is gone."""
    try:
        with open(f"{proc}/{pid}/stat") as f:
            stat = f.read()
    except OSError:
        return "gone"
    fields = stat[stat.rfind(")") + 2 :].split()
    if int(fields[19]) != starttime:
        return "gone"
    if fields[0] in ("Z", "X"):
        return "zombie"
    if exe:
        try:
            with open(f"{proc}/{pid}/cmdline", "rb") as f:
                argv = f.read().decode(errors="replace").split("\0")
        except OSError:
            return "gone"
        if not _names(exe, argv[:3]) and not _exe_is(proc, pid, exe):
            return "gone"
    return "running"


def _names(exe: str, argv: list[str]) -> bool:
    return any(a == exe or (a.startswith("/") and os.path.realpath(a) == exe) for a in argv)


def _exe_is(proc: str, pid: int, exe: str) -> bool:
    try:
        return os.path.realpath(os.readlink(f"{proc}/{pid}/exe")) == os.path.realpath(exe)
    except OSError:
        return False


def wait_dead(proc: str, pid: int, starttime: int, exe: str, seconds: float) -> str:
    end = time.monotonic() + seconds
    state = proc_state(proc, pid, starttime, exe)
    while state == "running" and time.monotonic() < end:
        time.sleep(0.1)
        state = proc_state(proc, pid, starttime, exe)
    return state


def stop(args: argparse.Namespace) -> dict[str, Any]:
    pidfile = read_pidfile(f"{args.root}/rollout/daemon.pid")
    if pidfile is None:
        return {"outcome": "none", "note": "no daemon pidfile: nothing to stop"}
    pid, starttime, exe = pidfile
    out: dict[str, Any] = {"pid": pid, "starttime": starttime, "exe": exe}
    state = proc_state(args.proc, pid, starttime, exe)
    if state != "running":
        out.update(outcome="already-dead", state=state)
        return out
    sig = signal.Signals[args.signal]
    os.kill(pid, sig)
    out.update(signal=sig.name, signalled_at=time.time())
    state = wait_dead(args.proc, pid, starttime, exe, args.grace)
    if state == "running":
        os.kill(pid, signal.SIGKILL)
        out.update(escalated=True, killed_at=time.time())
        state = wait_dead(args.proc, pid, starttime, exe, 10)
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
