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
Standard library only; runs on python3 >= 3.9.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import threading
import time
from typing import Any

# script_text() replaces the next line with common.py: it stays one line
# ruff: noqa: E501
# isort: off
from rollout.host.scripts.common import neighbours, parse_jsonl, proc_starttime, proc_state, safe_append, safe_mkdir, tail_window, working_memory  # inlined on hosts
# isort: on

MIB = 1 << 20
FALL = MIB  # the working set "falls" when it drops this much below its lowest so far
MAX_SAMPLES = 200
TOP = 10


def baseline_slack(limit: int | None) -> int:
    """How close to its baseline the working set must come: 1% of the limit, at least 16 MiB."""
    return max(16 * MIB, (limit or 0) // 100)


def memory_back(mem: dict[str, Any], budget: int | None, baseline: int | None) -> str | None:
    """Why the memory counts as back ("budget", "baseline", "unmeasured"), or None."""
    ws, limit = mem.get("working_set"), mem.get("limit")
    if ws is None:
        return "unmeasured"  # nothing to measure: do not wait for what cannot be seen
    if budget is not None and limit is not None and limit - ws >= budget:
        return "budget"
    if baseline is not None and ws <= baseline + baseline_slack(limit):
        return "baseline"
    if budget is None and baseline is None:
        return "unmeasured"
    return None


def baseline_of(root: str, pid: int, source: str | None) -> int | None:
    """The working set recorded before daemon `pid` started, or lower: the least one of the
    recent start records. A daemon restarted after a crash may have started while its
    predecessor's memory was still coming back; its own baseline would then be too high."""
    path = os.path.join(root, "rollout", "starts.jsonl")
    try:
        data, _, _ = tail_window(path, 256 * 1024)
    except OSError:
        return None
    seen: list[int] = []
    own = False
    for rec in parse_jsonl(data.splitlines()):
        base = rec.get("baseline") if isinstance(rec, dict) else None
        if not isinstance(base, dict) or base.get("source") != source:
            continue
        ws = base.get("working_set")
        if isinstance(ws, int):
            seen.append(ws)
            own = own or rec.get("pid") == pid
    return min(seen) if own else None


def thin(samples: list[list[Any]], keep: int = MAX_SAMPLES) -> list[list[Any]]:
    """At most `keep` samples, evenly spread, the first and the last always kept."""
    n = len(samples)
    if n <= keep:
        return samples
    idx = sorted({round(i * (n - 1) / (keep - 1)) for i in range(keep)})
    return [samples[i] for i in idx]


# ---------------------------------------------------------------- evidence: who holds memory


def shm_files(shm: str) -> list[dict[str, Any]]:
    """Files in /dev/shm (one level of folders too), biggest first, by memory they hold."""
    rows: list[dict[str, Any]] = []
    try:
        entries = list(os.scandir(shm))
        for entry in list(entries):
            if entry.is_dir(follow_symlinks=False):
                entries.extend(os.scandir(entry.path))
    except OSError:
        entries = []
    for entry in entries:
        try:
            if entry.is_file(follow_symlinks=False):
                st = entry.stat(follow_symlinks=False)
                rows.append({"path": entry.path, "bytes": st.st_blocks * 512, "size": st.st_size})
        except OSError:
            continue
    rows.sort(key=lambda r: -int(r["bytes"]))
    return rows[:TOP]


def holders(args: argparse.Namespace, mem: dict[str, Any]) -> dict[str, Any]:
    """What still holds the memory: the processes charged to the cgroup (the drain's own
    session left out), each with what it holds (anon, file, shmem), the files in /dev/shm,
    and the cgroup's own figures."""
    others = neighbours(args.cgroup_root, mem.get("source"), args.proc, [])
    return {
        "processes": others["processes"],
        "processes_bytes": others["bytes"],
        "shm": shm_files(args.shm),
        **{k: mem.get(k) for k in ("anon", "shmem", "file", "mapped_file", "active_file",
                                   "inactive_file")},
    }


# ---------------------------------------------------------------- the wait


class Zombie:
    """How long the pid stayed a zombie, and the note once its parent is too slow."""

    def __init__(self, grace: float) -> None:
        self.grace = grace
        self.seen = False
        self.since: float | None = None
        self.secs = 0.0
        self.note: str | None = None

    def update(self, state: str, ppid: int | None, t: float) -> None:
        if state == "zombie":
            self.seen = True
            if self.since is None:
                self.since = t
            total = self.secs + (t - self.since)
            if total >= self.grace and self.note is None:
                self.note = f"zombie not reaped after {total:.1f} s (parent PID {ppid})"
        elif self.since is not None:
            self.secs += t - self.since
            self.since = None

    def total(self, t: float) -> float:
        return self.secs + (t - self.since if self.since is not None else 0.0)


def unwritten(mem: dict[str, Any]) -> int:
    """Bytes of page cache that only waits to be written back (dirty, under writeback):
    counted in the working set until written, reclaimable as soon as it is."""
    return sum(v for v in (mem.get("dirty"), mem.get("writeback")) if isinstance(v, int))


def start_writeback() -> None:
    """Write dirty pages back now (sync(2), in a thread: the drain keeps measuring) rather
    than after the kernel's own expiry (30 s by default): a daemon that wrote its PCE or
    params just before it stopped leaves them dirty."""
    threading.Thread(target=os.sync, daemon=True).start()


class Plateau:
    """Since when the working set has not fallen (by FALL) below its lowest value."""

    def __init__(self) -> None:
        self.low: int | None = None
        self.since: float | None = None

    def flat_for(self, ws: int | None, t: float) -> float:
        if ws is None:
            return 0.0
        if self.low is None or self.since is None or ws < self.low - FALL:
            self.low, self.since = ws, t
        self.low = min(self.low, ws)
        return t - self.since


def drain(args: argparse.Namespace) -> dict[str, Any]:
    started = time.time()
    end = time.monotonic() + args.deadline
    died_at: float | None = None
    reaped_at: float | None = None
    back_since: float | None = None
    back_by: str | None = None
    first_state: str | None = None
    samples: list[list[Any]] = []
    mem: dict[str, Any] = {}
    outcome = "deadline"
    state = "running"
    zombie = Zombie(args.zombie_grace)
    plateau = Plateau()
    flat = 0.0
    flushed: int | None = None  # dirty page cache written back at a plateau (bytes then)
    if args.pid <= 1:  # 0: no daemon was stopped; 1 (init) or below is never the daemon
        args.pid, args.starttime = 0, -1
    if args.starttime is None:  # pin the process seen now: a later reuse of the pid is "gone"
        found = proc_starttime(args.proc, args.pid)
        args.starttime = found if found is not None else -1
    mem = working_memory(args.cgroup_root, args.proc)
    baseline = baseline_of(args.root, args.pid, mem.get("source"))
    budget = args.budget
    while True:
        t = time.time()
        state, ppid = proc_state(args.proc, args.pid, args.starttime)
        first_state = first_state or state
        if state != "running" and died_at is None:
            died_at = t
        zombie.update(state, ppid, t)
        if state == "gone" and reaped_at is None and zombie.seen:
            reaped_at = t
        mem = working_memory(args.cgroup_root, args.proc)
        samples.append([round(t - started, 3), mem.get("working_set")])
        back_by = memory_back(mem, budget, baseline) if state != "running" else None
        back_since = (back_since or t) if back_by else None
        process_done = state == "gone" or (state == "zombie" and zombie.note is not None)
        if process_done and back_by:
            outcome = "drained"
            break
        flat = plateau.flat_for(mem.get("working_set"), t) if process_done else 0.0
        if process_done and flat >= args.plateau:
            if flushed is None and unwritten(mem):
                flushed = unwritten(mem)  # dirty pages go once written: write them now
                start_writeback()
                plateau = Plateau()
                time.sleep(args.interval)
                continue
            outcome = "plateau"
            break
        if time.monotonic() >= end:
            break
        time.sleep(args.interval)
    ended = time.time()
    return {
        "outcome": outcome,
        "drained_by": back_by if outcome == "drained" else None,
        "pid": args.pid,
        "starttime": args.starttime,
        "state_at_start": first_state,
        "state": state,
        "died_at": died_at,
        "zombie_seen": zombie.seen,
        "zombie_secs": round(zombie.total(ended), 3),
        "reaped_at": reaped_at,
        "zombie_note": zombie.note,
        "memory_back_at": back_since if outcome == "drained" else None,
        "memory": mem,
        "working_set": mem.get("working_set"),
        "page_cache": mem.get("page_cache"),
        "budget": budget,
        "baseline": baseline,
        "plateau_secs": round(flat, 3),
        "flushed_dirty": flushed,
        "plateau": args.plateau,
        "holders": holders(args, mem) if outcome != "drained" else None,
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
    line = json.dumps(result, sort_keys=True)
    if not args.no_record:
        try:
            safe_mkdir(os.path.join(args.root, "rollout"))
            safe_append(os.path.join(args.root, "rollout", "drains.jsonl"), line + "\n", 0o644)
        except OSError as e:
            sys.stderr.write(f"drain: cannot record in drains.jsonl: {e}\n")
    print(line)
    return 0 if result["outcome"] == "drained" else 3


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
