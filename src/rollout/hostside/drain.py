"""Wait until a stopped daemon is gone from the process table AND its memory is back.

Run on the host by the controller:

    python3 - --pid P --starttime S [--root /data] [--threshold 0.10 | --threshold-bytes N]
              [--zombie-grace 30] [--deadline 600] < drain.py

A zombie (/proc/P/stat state Z) is dead but not gone: `kill -0` and pgrep still see it, and
its memory may not be back. A zombie its parent does not reap within --zombie-grace seconds
is noted, and the drain then finishes once the memory is back. Memory is back when the
cgroup usage is below threshold x limit (v2 memory.current/memory.max, v1
memory.usage_in_bytes/memory.limit_in_bytes); with no cgroup limit, when MemAvailable >=
(1 - threshold) x MemTotal in /proc/meminfo.

Prints one JSON object and appends it to <root>/rollout/drains.jsonl.
Exit status: 0 drained, 3 deadline, 2 bad arguments.
Standard library only; runs on python3 >= 3.9.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from typing import Any

# script_text() replaces the next line with common.py: it stays one line
# ruff: noqa: E501
# isort: off
from rollout.hostside.common import cgroup_memory, meminfo, proc_starttime, proc_state  # inlined on hosts
# isort: on


def memory(cgroup_root: str, proc: str) -> dict[str, Any]:
    """{usage, limit, source}: the container's cgroup if it has a limit, else /proc/meminfo."""
    m = cgroup_memory(cgroup_root)
    usage, limit, source = m["usage"], m["limit"], m["source"]
    if usage is not None and limit is not None:
        return {"usage": usage, "limit": limit, "source": source}
    mi = meminfo(proc)
    if "MemTotal" in mi and "MemAvailable" in mi:
        return {
            "usage": mi["MemTotal"] - mi["MemAvailable"],
            "limit": mi["MemTotal"],
            "source": "meminfo",
        }
    return {"usage": usage, "limit": None, "source": source}


def memory_back(mem: dict[str, Any], threshold: float, threshold_bytes: int | None) -> bool:
    usage, limit = mem.get("usage"), mem.get("limit")
    if usage is None:
        return True  # nothing to measure: do not wait for what cannot be seen
    if threshold_bytes is not None:
        return bool(usage < threshold_bytes)
    if limit is None:
        return True
    if mem.get("source") == "meminfo":
        # MemAvailable >= (1 - threshold) * MemTotal, i.e. used <= threshold * total
        return bool(limit - usage >= (1 - threshold) * limit)
    return bool(usage < threshold * limit)


def thin(samples: list[list[Any]], keep: int = 50) -> list[list[Any]]:
    n = len(samples)
    if n <= keep:
        return samples
    idx = sorted({round(i * (n - 1) / (keep - 1)) for i in range(keep)})
    return [samples[i] for i in idx]


def drain(args: argparse.Namespace) -> dict[str, Any]:
    started = time.time()
    end = time.monotonic() + args.deadline
    died_at: float | None = None
    reaped_at: float | None = None
    zombie_since: float | None = None
    zombie_secs = 0.0
    zombie_seen = False
    zombie_note: str | None = None
    back_since: float | None = None
    first_state: str | None = None
    samples: list[list[Any]] = []
    mem: dict[str, Any] = {}
    outcome = "deadline"
    state = "running"
    if args.pid <= 1:  # 0: no daemon was stopped; 1 (init) or below is never the daemon
        args.pid, args.starttime = 0, -1
    if args.starttime is None:  # pin the process seen now: a later reuse of the pid is "gone"
        found = proc_starttime(args.proc, args.pid)
        args.starttime = found if found is not None else -1
    while True:
        t = time.time()
        state, ppid = proc_state(args.proc, args.pid, args.starttime)
        if first_state is None:
            first_state = state
        if state != "running" and died_at is None:
            died_at = t
        if state == "zombie":
            zombie_seen = True
            if zombie_since is None:
                zombie_since = t
            zsecs = zombie_secs + (t - zombie_since)
            if zsecs >= args.zombie_grace and zombie_note is None:
                zombie_note = f"zombie not reaped after {zsecs:.1f} s (parent PID {ppid})"
        elif zombie_since is not None:
            zombie_secs += t - zombie_since
            zombie_since = None
        if state == "gone" and reaped_at is None and zombie_seen:
            reaped_at = t
        mem = memory(args.cgroup_root, args.proc)
        samples.append([round(t, 3), mem.get("usage")])
        back = state != "running" and memory_back(mem, args.threshold, args.threshold_bytes)
        if back:
            if back_since is None:
                back_since = t
        else:
            back_since = None
        process_done = state == "gone" or (state == "zombie" and zombie_note is not None)
        if process_done and back:
            outcome = "drained"
            break
        if time.monotonic() >= end:
            break
        time.sleep(args.interval)
    ended = time.time()
    if zombie_since is not None:
        zombie_secs += ended - zombie_since
    return {
        "outcome": outcome,
        "pid": args.pid,
        "starttime": args.starttime,
        "state_at_start": first_state,
        "state": state,
        "died_at": died_at,
        "zombie_seen": zombie_seen,
        "zombie_secs": round(zombie_secs, 3),
        "reaped_at": reaped_at,
        "zombie_note": zombie_note,
        "memory_back_at": back_since if outcome == "drained" else None,
        "memory": mem,
        "threshold": args.threshold,
        "threshold_bytes": args.threshold_bytes,
        "samples": thin(samples),
        "started": started,
        "ended": ended,
    }


def parse_args(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(description="wait until a process is gone and memory is back")
    p.add_argument("--pid", type=int, required=True)
    p.add_argument("--starttime", type=int, help="field 22 of /proc/PID/stat when it was seen")
    p.add_argument("--root", default="/data")
    p.add_argument("--cgroup-root", default="/sys/fs/cgroup")
    p.add_argument("--proc", default="/proc")
    p.add_argument("--threshold", type=float, default=0.10, help="fraction of the limit")
    p.add_argument("--threshold-bytes", type=int, help="absolute usage bound instead")
    p.add_argument("--zombie-grace", type=float, default=30.0)
    p.add_argument("--deadline", type=float, default=600.0)
    p.add_argument("--interval", type=float, default=0.1)
    p.add_argument("--no-record", action="store_true", help="do not append to drains.jsonl")
    return p.parse_args(argv)


def main(argv: list[str]) -> int:
    args = parse_args(argv)
    result = drain(args)
    line = json.dumps(result, sort_keys=True)
    if not args.no_record:
        try:
            os.makedirs(os.path.join(args.root, "rollout"), exist_ok=True)
            with open(os.path.join(args.root, "rollout", "drains.jsonl"), "a") as f:
                f.write(line + "\n")
        except OSError as e:
            sys.stderr.write(f"drain: cannot record in drains.jsonl: {e}\n")
    print(line)
    return 0 if result["outcome"] == "drained" else 3


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
