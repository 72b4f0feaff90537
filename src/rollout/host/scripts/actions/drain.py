"""The drain's rule (drain.py's, and ops.drain's in-process): wait until a stopped daemon
is gone from the process table AND the memory it held is back; drain.py's docstring says
how. Standard library only; python3 >= 3.9."""

from __future__ import annotations

import json
import os
import time
from typing import Any

# ruff: noqa: E501
# isort: off
from rollout.host.scripts.common import neighbours, parse_jsonl, proc_starttime, proc_state, safe_append, safe_mkdir, tail_window, working_memory  # inlined on hosts
# isort: on


class DrainPaths:
    """Where the drain reads the host: /proc, the cgroup tree, /dev/shm. (Plain classes, not
    NamedTuple: each forked call of ops runs this module's body, and a NamedTuple costs it.)"""

    def __init__(self, proc: str = "/proc", cgroup_root: str = "/sys/fs/cgroup",
                 shm: str = "/dev/shm") -> None:
        self.proc, self.cgroup_root, self.shm = proc, cgroup_root, shm


class Figures:
    """The controller's figures: bytes the new daemon needs (None: no budget figure), and
    seconds for the plateau, a zombie's grace, the whole wait and each poll."""

    def __init__(self, budget: int | None = None, plateau: float = 30.0,
                 zombie_grace: float = 30.0, deadline: float = 600.0,
                 interval: float = 0.05) -> None:
        self.budget, self.plateau, self.zombie_grace = budget, plateau, zombie_grace
        self.deadline, self.interval = deadline, interval


HERE = DrainPaths()
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


def holders(where: DrainPaths, mem: dict[str, Any]) -> dict[str, Any]:
    """What still holds the memory: the processes charged to the cgroup (the drain's own
    session left out), each with what it holds (anon, file, shmem), the files in /dev/shm,
    and the cgroup's own figures."""
    others = neighbours(where.cgroup_root, mem.get("source"), where.proc, [])
    return {
        "processes": others["processes"],
        "processes_bytes": others["bytes"],
        "shm": shm_files(where.shm),
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
    import threading

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



def wait_drained(root: str, pid: int, starttime: int | None, figures: Figures,
                 where: DrainPaths = HERE) -> dict[str, Any]:
    """Wait until daemon `pid` (at `starttime`; None: as seen now) is gone and its memory
    back, by `figures`; the drain's report (outcome drained, deadline or plateau)."""
    started = time.time()
    end = time.monotonic() + figures.deadline
    died_at: float | None = None
    reaped_at: float | None = None
    back_since: float | None = None
    back_by: str | None = None
    first_state: str | None = None
    samples: list[list[Any]] = []
    mem: dict[str, Any] = {}
    outcome = "deadline"
    state = "running"
    zombie = Zombie(figures.zombie_grace)
    plateau = Plateau()
    flat = 0.0
    flushed: int | None = None  # dirty page cache written back at a plateau (bytes then)
    if pid <= 1:  # 0: no daemon was stopped; 1 (init) or below is never the daemon
        pid, starttime = 0, -1
    if starttime is None:  # pin the process seen now: a later reuse of the pid is "gone"
        found = proc_starttime(where.proc, pid)
        starttime = found if found is not None else -1
    mem = working_memory(where.cgroup_root, where.proc)
    baseline = baseline_of(root, pid, mem.get("source"))
    budget = figures.budget
    while True:
        t = time.time()
        state, ppid = proc_state(where.proc, pid, starttime)
        first_state = first_state or state
        if state != "running" and died_at is None:
            died_at = t
        zombie.update(state, ppid, t)
        if state == "gone" and reaped_at is None and zombie.seen:
            reaped_at = t
        mem = working_memory(where.cgroup_root, where.proc)
        samples.append([round(t - started, 3), mem.get("working_set")])
        back_by = memory_back(mem, budget, baseline) if state != "running" else None
        back_since = (back_since or t) if back_by else None
        process_done = state == "gone" or (state == "zombie" and zombie.note is not None)
        if process_done and back_by:
            outcome = "drained"
            break
        flat = plateau.flat_for(mem.get("working_set"), t) if process_done else 0.0
        if process_done and flat >= figures.plateau:
            if flushed is None and unwritten(mem):
                flushed = unwritten(mem)  # dirty pages go once written: write them now
                start_writeback()
                plateau = Plateau()
                time.sleep(figures.interval)
                continue
            outcome = "plateau"
            break
        if time.monotonic() >= end:
            break
        time.sleep(figures.interval)
    ended = time.time()
    return {
        "outcome": outcome,
        "drained_by": back_by if outcome == "drained" else None,
        "pid": pid,
        "starttime": starttime,
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
        "plateau": figures.plateau,
        "holders": holders(where, mem) if outcome != "drained" else None,
        "samples": thin(samples),
        "started": started,
        "ended": ended,
    }


def record(root: str, report: dict[str, Any]) -> str | None:
    """Append the drain's report to <root>/rollout/drains.jsonl; why it could not, or None."""
    try:
        safe_mkdir(os.path.join(root, "rollout"))
        safe_append(os.path.join(root, "rollout", "drains.jsonl"),
                    json.dumps(report, sort_keys=True) + "\n", 0o644)
    except OSError as e:
        return f"drain: cannot record in drains.jsonl: {e}"
    return None
