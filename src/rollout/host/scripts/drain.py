"""Wait until a stopped daemon is gone from the process table AND the memory it held is back.

Run on the host by the controller:

    python3 - --pid P --starttime S [--root /data] [--budget N] [--plateau 30]
              [--zombie-grace 30] [--deadline 600] < drain.py

A zombie (/proc/P/stat state Z) is dead but not gone: `kill -0` and pgrep still see it, and
its memory may not be back. A zombie its parent does not reap within --zombie-grace seconds
is noted, and the drain then finishes once the memory is back.

The memory that matters is the working set: cgroup usage less the page cache no live
process maps (memory.stat's file pages less shmem, mapped, dirty and writeback pages:
common.reclaimable_cache), on the active list or the inactive one; where the container has
no limit, MemTotal - MemAvailable. Page cache the old daemon left (a params file it mmap'd
and read many times, so its pages turned active) is not waited for. The memory is back when
the headroom (limit minus working set) fits the new daemon's budget (--budget bytes: the
controller's budget rule decides the figure, rollout.steps.budget, leaving the container's
other processes what they held before the stop; this script never works it out), or when the
working set is back to the baseline the supervisor recorded just before it started the old
daemon (<root>/rollout/starts.jsonl; the least of the recent records, so that a restart
while a crashed daemon's memory was still charged cannot raise it).

When the process is gone and the working set has not fallen for --plateau seconds while
dirty page cache is part of it (a PCE or params written just before the stop), that cache
is written back once (sync, "flushed_dirty": the bytes then) and the plateau starts over;
otherwise the drain fails early and names what still holds memory: the processes charged to the cgroup
(pid, command line, and what each holds: anon, mapped file, shmem), the files in /dev/shm,
and the cgroup's anon, shmem, file and mapped figures.

Prints one JSON object and appends it to <root>/rollout/drains.jsonl.
Exit status: 0 drained, 3 deadline or plateau, 2 bad arguments.
The rule is actions/drain.py's, which ops.drain runs in-process (the same call the
guard makes); this script is its argv wrapper.
Standard library only; runs on python3 >= 3.9.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

# ruff: noqa: E501, F401
# isort: off
from rollout.host.scripts.common import working_memory  # inlined on hosts
from rollout.host.scripts.actions.drain import MIB, DrainPaths, Figures, Plateau, baseline_slack, memory_back, record, start_writeback, thin, wait_drained  # inlined on hosts
# isort: on


def drain(args: argparse.Namespace) -> dict[str, Any]:
    """The drain's report for these arguments (actions/drain.py's rule)."""
    figures = Figures(args.budget, args.plateau, args.zombie_grace, args.deadline,
                      args.interval)
    return wait_drained(args.root, args.pid, args.starttime, figures,
                        DrainPaths(args.proc, args.cgroup_root, args.shm))


def parse_args(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(description="wait until a process is gone and memory is back")
    p.add_argument("--pid", type=int, required=True)
    p.add_argument("--starttime", type=int, help="field 22 of /proc/PID/stat when it was seen")
    p.add_argument("--root", default="/data")
    p.add_argument("--cgroup-root", default="/sys/fs/cgroup")
    p.add_argument("--proc", default="/proc")
    p.add_argument("--shm", default="/dev/shm")
    p.add_argument("--budget", type=int,
                   help="bytes the new daemon needs under the limit (the controller's figure)")
    p.add_argument("--plateau", type=float, default=30.0,
                   help="fail when the working set has not fallen for this many seconds")
    p.add_argument("--zombie-grace", type=float, default=30.0)
    p.add_argument("--deadline", type=float, default=600.0)
    p.add_argument("--interval", type=float, default=0.05)
    p.add_argument("--no-record", action="store_true", help="do not append to drains.jsonl")
    return p.parse_args(argv)


def main(argv: list[str]) -> int:
    args = parse_args(argv)
    result = drain(args)
    if not args.no_record:
        problem = record(args.root, result)
        if problem:
            sys.stderr.write(problem + "\n")
    print(json.dumps(result, sort_keys=True))
    return 0 if result["outcome"] == "drained" else 3


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
