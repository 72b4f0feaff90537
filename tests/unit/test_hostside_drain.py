"""The drain (ops.drain's rule): zombie-aware and memory-aware wait, against fake cgroup
trees and real zombies."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from rollout.host.scripts import script_text
from rollout.host.scripts.actions import drain as drain_rule
from rollout.host.scripts.actions.hold import drain_figures
from rollout.host.scripts.common import drain_failure as failure_reason
from rollout.host.scripts.common import working_memory

OPS = script_text("ops")  # the drain's rule as a host runs it (ops.drain)
DRIVER = """import json, sys
ns = {"__name__": "ops"}
exec(sys.stdin.read(), ns)
a = json.loads(sys.argv[1])
out = ns["wait_drained"](a["root"], a["pid"], a["starttime"], ns["drain_figures"](a["settings"]),
                         ns["DrainPaths"](**a["where"]))
ns["record"](a["root"], out)
print(json.dumps(out, sort_keys=True))
"""
"""ops.drain's rule (wait_drained, then record) in the shipped text, in a python3 of its own,
reading the test's /proc, cgroup tree and /dev/shm (ops.drain reads the host's own)."""
PYTHON = os.environ.get("ROLLOUT_HOSTSIDE_PYTHON", sys.executable)


def stat_of(pid: int) -> list[str]:
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()


def zombie_child() -> subprocess.Popen[bytes]:
    """A child that exits at once and stays a zombie until the test calls wait()."""
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    end = time.monotonic() + 60  # a safety net: a loaded machine starts python slowly
    while stat_of(child.pid)[0] != "Z":
        assert time.monotonic() < end
        time.sleep(0.01)
    return child


MIB = 1 << 20


def v2_tree(
    tmp: Path, usage: int, limit: str = "1000", inactive_file: int = 0, **stat: int
) -> Path:
    cg = tmp / "cgroup"
    cg.mkdir(exist_ok=True)
    (cg / "cgroup.controllers").write_text("memory\n")
    (cg / "memory.current").write_text(f"{usage}\n")
    (cg / "memory.max").write_text(f"{limit}\n")
    write_v2_stat(cg, inactive_file, **stat)
    return cg


def write_v2_stat(cg: Path, inactive_file: int = 0, **stat: int) -> None:
    fields = {"anon": 0, "file": inactive_file, "shmem": 0, "file_mapped": 0,
              "active_file": 0, **stat, "inactive_file": inactive_file}
    (cg / "memory.stat").write_text("".join(f"{k} {v}\n" for k, v in fields.items()))


def fifo_at(path: Path) -> None:
    """A new FIFO at `path`, put there whole (a reader of the old one keeps the old one)."""
    new = path.with_name(path.name + ".next")
    os.mkfifo(new)
    new.replace(path)


def feed_read(fifo: Path, text: str, then: Callable[[], object] | None = None) -> None:
    """Answer the next read of the file `fifo` with `text`. Opening the FIFO for writing
    blocks until the reader opens it: `then` runs at that moment, before the reader gets
    its text, and must put the next file in place (a fresh FIFO by default: a reader that
    has not yet closed this one never takes the next answer for part of this one)."""
    with open(fifo, "w") as f:
        if then is None:
            fifo_at(fifo)
        else:
            then()
        f.write(text)


def run_drain(root: Path, pid: int, starttime: int | None = None,
              cgroup_root: str = "/sys/fs/cgroup", proc: str = "/proc", shm: str = "/dev/shm",
              timeout: float = 120, **settings: float) -> dict[str, Any]:
    """The drain of `pid` by the controller's `settings` (budget, plateau, zombie_grace,
    deadline), recorded in drains.jsonl: its report."""
    where = {"proc": proc, "cgroup_root": cgroup_root, "shm": shm}
    call = json.dumps({"root": str(root), "pid": pid, "starttime": starttime,
                       "settings": settings, "where": where})
    p = subprocess.run([PYTHON, "-c", DRIVER, call], input=OPS, capture_output=True,
                       text=True, timeout=timeout)
    lines = p.stdout.strip().splitlines()
    assert p.returncode == 0 and len(lines) == 1, p.stdout + p.stderr
    out: dict[str, Any] = json.loads(lines[0])
    return out


def test_zombie_then_reaped_then_memory_back(tmp_path: Path) -> None:
    cg = v2_tree(tmp_path, 900)
    current = cg / "memory.current"
    fifo_at(current)  # each read of the usage is a step the test takes in turn
    child = zombie_child()
    starttime = stat_of(child.pid)[19]
    stamps: dict[str, float] = {}

    def reap() -> None:
        stamps["reaped"] = time.time()  # (stamps come before the change they mark)
        child.wait()
        fifo_at(current)

    def memory_back() -> None:
        stamps["memory"] = time.time()
        tmp = cg / "memory.current.new"
        tmp.write_text("50\n")
        tmp.replace(current)  # the FIFO goes (whole, at once): every later read says 50

    def zombie_seen_then_reaped_then_memory_back() -> None:
        feed_read(current, "900\n")  # the drain's first look, before its loop
        feed_read(current, "900\n", then=reap)  # its first sample: it has seen the zombie
        feed_read(current, "900\n", then=memory_back)  # a sample after the reap: gone

    threading.Thread(target=zombie_seen_then_reaped_then_memory_back, daemon=True).start()
    out = run_drain(tmp_path, pid=child.pid, starttime=int(starttime), cgroup_root=str(cg),
                    budget=900, deadline=20)
    assert out["outcome"] == "drained" and out["drained_by"] == "budget", out
    assert out["zombie_seen"] is True and out["zombie_note"] is None
    assert out["state_at_start"] == "zombie"
    assert out["zombie_secs"] > 0
    assert out["reaped_at"] >= stamps["reaped"] and out["memory_back_at"] >= stamps["memory"]
    assert out["working_set"] == 50 and out["budget"] == 900
    assert out["memory"]["usage"] == 50 and out["memory"]["source"] == "cgroup-v2"
    assert out["died_at"] <= out["reaped_at"] <= out["ended"]
    assert out["died_at"] <= out["memory_back_at"] <= out["ended"]
    assert out["samples"][0] == [0.0, 900] or out["samples"][0][1] == 900
    assert out["samples"][-1][1] == 50
    assert out["holders"] is None
    recorded = (tmp_path / "rollout" / "drains.jsonl").read_text().splitlines()
    assert json.loads(recorded[-1]) == out


def test_page_cache_left_behind_is_not_waited_for(tmp_path: Path) -> None:
    """Usage is 900 of 1000, but 850 of it is page cache no process maps: the headroom fits."""
    cg = v2_tree(tmp_path, 900, inactive_file=800, file=850, active_file=50)
    out = run_drain(tmp_path, pid=999999999, cgroup_root=str(cg), budget=150, deadline=20)
    assert out["outcome"] == "drained" and out["drained_by"] == "budget", out
    assert out["working_set"] == 50 and out["page_cache"] == 850
    assert out["memory"]["inactive_file"] == 800
    assert len(out["samples"]) == 1 and out["samples"][0][1] == 50


def test_active_page_cache_nobody_maps_is_not_waited_for(tmp_path: Path) -> None:
    """Issue 17: the old daemon's params, mmapped and read many times, left 600 MiB on the
    ACTIVE list when it died. Nobody maps them now: they are not waited for, active or not
    (counting only the inactive list, the working set was 700 MiB and the drain hit its
    plateau)."""
    cg = v2_tree(tmp_path, 700 * MIB, limit=str(1 << 30), anon=90 * MIB, file=600 * MIB,
                 active_file=590 * MIB, inactive_file=10 * MIB)
    out = run_drain(tmp_path, pid=999999999, cgroup_root=str(cg), budget=900 * MIB, plateau=0.5,
                    deadline=20)
    assert out["outcome"] == "drained" and out["drained_by"] == "budget", out
    assert out["working_set"] == 100 * MIB and out["page_cache"] == 600 * MIB


@pytest.mark.parametrize("held", ["shmem", "file_mapped", "file_dirty", "file_writeback"])
def test_page_cache_that_cannot_go_is_counted(tmp_path: Path, held: str) -> None:
    """tmpfs and /dev/shm (shmem), pages a live process maps, dirty and writeback pages
    stay in the working set: 300 MiB of 600 here, so the headroom misses the budget."""
    stat = {"anon": 90 * MIB, "file": 600 * MIB, "active_file": 590 * MIB,
            "inactive_file": 10 * MIB, held: 300 * MIB}
    cg = v2_tree(tmp_path, 700 * MIB, limit=str(1 << 30), **stat)
    out = run_drain(tmp_path, pid=999999999, cgroup_root=str(cg), budget=900 * MIB, plateau=0.3,
                    deadline=20)
    assert out["outcome"] == "plateau", out
    assert out["working_set"] == 400 * MIB and out["page_cache"] == 300 * MIB
    written_back = 300 * MIB if held in ("file_dirty", "file_writeback") else None
    assert out["flushed_dirty"] == written_back  # written once; these stayed all the same
    reason = failure_reason(out)
    assert "usage 700.0MiB less 300.0MiB of page cache no live process maps" in reason
    name = {"shmem": "tmpfs/shm", "file_mapped": "mapped", "file_dirty": "dirty",
            "file_writeback": "writeback"}[held]
    assert f"(file 600.0MiB less {name} 300.0MiB; active or inactive alike)" in reason, reason


def test_dirty_page_cache_is_written_back_at_the_plateau_then_not_waited_for(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A daemon that wrote its PCE just before the stop leaves dirty pages: counted until
    written back, so at the plateau the drain writes them back once (sync) and measures
    again; written, they are page cache no process maps and the memory is back."""
    dirty = {"anon": 90 * MIB, "file": 600 * MIB, "active_file": 590 * MIB}
    cg = v2_tree(tmp_path, 700 * MIB, limit=str(1 << 30), inactive_file=10 * MIB,
                 file_dirty=300 * MIB, **dirty)
    flushes: list[float] = []

    def written() -> None:  # what sync(2) does to the cgroup's figures
        flushes.append(time.monotonic())
        write_v2_stat(cg, 10 * MIB, file_dirty=0, **dirty)

    monkeypatch.setattr(drain_rule, "start_writeback", written)
    figures = drain_rule.Figures(900 * MIB, plateau=0.3, deadline=20)
    out = drain_rule.wait_drained(str(tmp_path), 999999999, None, figures,
                                  drain_rule.DrainPaths(cgroup_root=str(cg)))
    assert len(flushes) == 1, out
    assert out["outcome"] == "drained" and out["flushed_dirty"] == 300 * MIB, out
    assert out["working_set"] == 100 * MIB


def test_back_to_the_baseline_recorded_before_the_daemon_started(tmp_path: Path) -> None:
    """The budget never fits (another tenant holds memory), but the working set is back
    where it was before the old daemon started: the least of the recent start records."""
    cg = v2_tree(tmp_path, 700 * MIB, limit=str(1 << 30))
    (tmp_path / "rollout").mkdir()
    starts = [
        {"pid": 4194401, "baseline": {"source": "cgroup-v2", "working_set": 690 * MIB}},
        {"pid": 4194403, "baseline": {"source": "cgroup-v2", "working_set": 900 * MIB}},
        {"pid": 4194405, "baseline": {"source": "cgroup-v1", "working_set": 1}},
    ]  # 4194403 restarted after a crash, while its predecessor's memory was still charged;
    # pids above the kernel's largest pid_max (4194304): never a live process here
    lines = [json.dumps(r) for r in starts] + ["{cut"]
    (tmp_path / "rollout" / "starts.jsonl").write_text("\n".join(lines) + "\n")
    budget: dict[str, Any] = {"budget": 900 * MIB, "plateau": 0.3, "deadline": 20}
    out = run_drain(tmp_path, pid=4194403, cgroup_root=str(cg), **budget)
    assert out["outcome"] == "drained" and out["drained_by"] == "baseline", out
    assert out["baseline"] == 690 * MIB, out
    (cg / "memory.current").write_text(f"{800 * MIB}\n")  # under 4194403's own, over the least
    out = run_drain(tmp_path, pid=4194403, cgroup_root=str(cg), **budget)
    assert out["outcome"] == "plateau", out
    out = run_drain(tmp_path, pid=4194404, cgroup_root=str(cg), **budget)
    assert out["outcome"] == "plateau" and out["baseline"] is None  # no start record: budget only


def test_plateau_fails_early_and_names_the_holders(tmp_path: Path) -> None:
    cg = v2_tree(tmp_path, 900 * MIB, limit=str(1 << 30), anon=500 * MIB, shmem=300 * MIB,
                 file=350 * MIB, inactive_file=20 * MIB)
    stray = subprocess.Popen(["sleep", "60"])
    shm = tmp_path / "shm"
    shm.mkdir()
    (shm / "lab-srs-pool.77").write_bytes(b"x" * (1 << 20))
    (shm / "empty").touch()
    (cg / "cgroup.procs").write_text(f"{os.getpid()}\n{stray.pid}\n")
    try:
        out = run_drain(tmp_path, pid=999999999, cgroup_root=str(cg), shm=str(shm),
                        budget=924 * MIB, plateau=0.5, deadline=60)
    finally:
        stray.kill()
        stray.wait()
    assert out["outcome"] == "plateau", out
    assert out["plateau_secs"] >= 0.5 and out["memory_back_at"] is None
    held = out["holders"]
    assert held["anon"] == 500 * MIB and held["shmem"] == 300 * MIB and held["file"] == 350 * MIB
    assert held["shm"][0]["path"] == str(shm / "lab-srs-pool.77")
    assert held["shm"][0]["bytes"] >= 1 << 20 and held["shm"][-1]["bytes"] == 0
    pids = {p["pid"]: p for p in held["processes"]}
    assert stray.pid in pids and pids[stray.pid]["cmdline"] == "sleep 60"
    assert pids[stray.pid]["rss"] > 0
    assert os.getpid() not in pids  # an ancestor of the drain: its own session


def test_plateau_is_when_the_working_set_stops_falling() -> None:
    """Falling memory is no plateau; flat or rising memory is, from its lowest point."""
    p = drain_rule.Plateau()
    mib = drain_rule.MIB
    assert p.flat_for(900 * mib, 10.0) == 0.0
    assert p.flat_for(800 * mib, 11.0) == 0.0  # fell: the clock restarts
    assert p.flat_for(800 * mib - 1000, 12.0) == 1.0  # less than FALL: flat
    assert p.flat_for(850 * mib, 13.0) == 2.0  # rising is not falling
    assert p.flat_for(700 * mib, 14.0) == 0.0
    assert p.flat_for(None, 15.0) == 0.0


def test_zombie_never_reaped_is_noted_and_drain_goes_on(tmp_path: Path) -> None:
    cg = v2_tree(tmp_path, 10)
    child = zombie_child()
    try:
        out = run_drain(tmp_path, pid=child.pid, cgroup_root=str(cg), budget=900, zombie_grace=0.4,
                        deadline=20)
    finally:
        child.wait()
    assert out["outcome"] == "drained"
    assert out["zombie_seen"] and out["reaped_at"] is None
    assert f"(parent PID {os.getpid()})" in out["zombie_note"]
    assert out["zombie_note"].startswith("zombie not reaped after ")
    assert out["zombie_secs"] >= 0.4


def test_deadline_ends_the_drain_when_process_keeps_running(tmp_path: Path) -> None:
    """A running process is no plateau, however flat the memory: only the deadline ends it."""
    cg = v2_tree(tmp_path, 900)
    child = subprocess.Popen(["sleep", "30"])
    try:
        out = run_drain(tmp_path, pid=child.pid, cgroup_root=str(cg), budget=900, plateau=0.1,
                        deadline=0.5)
    finally:
        child.kill()
        child.wait()
    assert out["outcome"] == "deadline"
    assert out["died_at"] is None and out["memory_back_at"] is None
    assert out["zombie_seen"] is False and out["state"] == "running"
    assert out["holders"]["processes"] is not None


def test_reused_pid_counts_as_gone(tmp_path: Path) -> None:
    cg = v2_tree(tmp_path, 10)
    out = run_drain(tmp_path, pid=os.getpid(), starttime=1, cgroup_root=str(cg), budget=900,
                    deadline=20)
    assert out["outcome"] == "drained" and out["state_at_start"] == "gone"
    assert len(out["samples"]) == 1


def test_meminfo_fallback_with_fake_proc_and_unlimited_v1(tmp_path: Path) -> None:
    cg = tmp_path / "cgroup" / "memory"
    cg.mkdir(parents=True)
    (cg / "memory.usage_in_bytes").write_text("123456\n")
    (cg / "memory.limit_in_bytes").write_text("9223372036854771712\n")
    proc = tmp_path / "proc"
    (proc / "4242").mkdir(parents=True)
    stat = "4242 (cuzk-daemon) Z 1 4242 4242 0 -1 0 0 0 0 0 0 0 0 0 20 0 1 0 777 0 0\n"
    meminfo = "MemTotal: 1000 kB\nMemFree: 50 kB\nMemAvailable: {} kB\nCached: 300 kB\n"
    (proc / "meminfo").write_text(meminfo.format(100))
    fifo = proc / "4242" / "stat"
    os.mkfifo(fifo)
    stamps: dict[str, float] = {}

    def zombie_seen_then_reaped_then_memory_back() -> None:
        with open(fifo, "w") as f:  # opens once the drain reads its stat: it sees a zombie
            stamps["reaped"] = time.time()  # (stamps come before the change they mark)
            fifo.unlink()  # its next read finds the pid gone (reaped)
            f.write(stat)
        stamps["memory"] = time.time()
        (proc / "meminfo").write_text(meminfo.format(950))

    threading.Thread(target=zombie_seen_then_reaped_then_memory_back, daemon=True).start()
    out = run_drain(tmp_path, pid=4242, starttime=777, proc=str(proc),
                    cgroup_root=str(tmp_path / "cgroup"), budget=900 * 1024, deadline=20)
    assert out["outcome"] == "drained" and out["zombie_seen"]
    assert out["memory"]["source"] == "meminfo" and out["memory"]["limit"] == 1000 * 1024
    assert out["working_set"] == 50 * 1024 and out["page_cache"] == 300 * 1024
    assert stamps["reaped"] <= stamps["memory"]
    assert out["state_at_start"] == "zombie" and out["state"] == "gone"
    assert out["died_at"] <= out["reaped_at"] <= out["ended"]
    assert out["died_at"] <= out["memory_back_at"] <= out["ended"]


V1_STAT = """cache 5000
rss 100
shmem 7
total_cache 734003200
total_rss 104857600
total_shmem 100663296
total_mapped_file 1048576
total_inactive_file 419430400
total_active_file 209715200
total_dirty 0
total_writeback 0
"""
V2_STAT = """anon 104857600
file 734003200
kernel 8388608
shmem 100663296
file_mapped 1048576
active_anon 1000
inactive_file 419430400
active_file 209715200
file_dirty 0
file_writeback 0
"""


def test_working_memory_v1_and_v2_from_fixture_files(tmp_path: Path) -> None:
    """Same figures from either layout; the working set leaves out the file pages nobody maps
    (700 MiB of file pages less 96 MiB of shmem and 1 MiB mapped), active or inactive."""
    v1 = tmp_path / "v1" / "memory"
    v1.mkdir(parents=True)
    (v1 / "memory.usage_in_bytes").write_text(f"{900 * MIB}\n")
    (v1 / "memory.limit_in_bytes").write_text(f"{1 << 30}\n")
    (v1 / "memory.stat").write_text(V1_STAT)
    v2 = tmp_path / "v2"
    v2.mkdir()
    (v2 / "cgroup.controllers").write_text("cpu memory\n")
    (v2 / "memory.current").write_text(f"{900 * MIB}\n")
    (v2 / "memory.max").write_text(f"{1 << 30}\n")
    (v2 / "memory.stat").write_text(V2_STAT)
    noproc = str(tmp_path / "noproc")
    m1 = working_memory(str(tmp_path / "v1"), noproc)
    m2 = working_memory(str(v2), noproc)
    assert m1.pop("source") == "cgroup-v1" and m2.pop("source") == "cgroup-v2"
    assert m1 == m2 == {
        "usage": 900 * MIB, "limit": 1 << 30, "working_set": 297 * MIB,
        "page_cache": 603 * MIB, "anon": 100 * MIB, "file": 700 * MIB, "shmem": 96 * MIB,
        "inactive_file": 400 * MIB, "active_file": 200 * MIB, "mapped_file": MIB,
        "dirty": 0, "writeback": 0,
    }


def test_memory_back_by_budget_baseline_or_nothing_to_measure() -> None:
    m = {"working_set": 300, "limit": 1000}
    assert drain_rule.memory_back(m, 700, None) == "budget"
    assert drain_rule.memory_back(m, 701, None) is None
    slack = drain_rule.baseline_slack(1000)
    assert drain_rule.memory_back(m, 900, 300 - slack) == "baseline"
    assert drain_rule.memory_back(m, 900, 299 - slack) is None
    assert drain_rule.memory_back({"working_set": None}, 900, None) == "unmeasured"
    assert drain_rule.memory_back(m, None, None) == "unmeasured"


def test_the_host_takes_the_budget_as_given_and_never_works_it_out() -> None:
    """The budget rule lives on the controller (rollout.steps.budget): the drain takes the
    figure from the call's settings, and has no margin to compute one from the limit."""
    assert drain_figures({"budget": 900}).budget == 900
    assert drain_figures({}).budget is None and drain_figures(None).budget is None
    assert not hasattr(drain_rule, "budget_of")
    assert not hasattr(drain_figures({"margin": 64}), "margin")


def test_thin_keeps_ends_and_at_most_200() -> None:
    samples = [[float(i), i] for i in range(1000)]
    out = drain_rule.thin(samples)
    assert len(out) == 200 and out[0] == [0.0, 0] and out[-1] == [999.0, 999]
    assert drain_rule.thin(samples[:10]) == samples[:10]


def test_step_failure_reason_names_the_holders() -> None:
    """What was counted, and each holder by what it holds."""
    out = {
        "outcome": "plateau", "plateau": 5, "pid": 7, "state": "gone",
        "working_set": 300 * MIB, "page_cache": 128 * MIB, "budget": 448 * MIB,
        "memory": {"limit": 512 * MIB, "usage": 428 * MIB, "file": 224 * MIB,
                   "shmem": 96 * MIB, "source": "cgroup-v2"},
        "holders": {
            "shm": [
                {"path": "/dev/shm/lab-srs-pool.7", "bytes": 96 * MIB},
                {"path": "/dev/shm/x", "bytes": 0},
            ],
            "processes": [
                {"pid": 99, "cmdline": "python3 -c hog", "rss": 100 * MIB,
                 "anon": 90 * MIB, "file": 10 * MIB, "shmem": 0},
                {"pid": 98, "cmdline": "old-host", "rss": 5 * MIB},
            ],
            "anon": 150 * MIB, "shmem": 96 * MIB, "file": 224 * MIB,
        },
    }
    reason = failure_reason(out)
    assert reason.startswith("memory stopped falling for 5s: working set 300.0MiB (usage "
                             "428.0MiB less 128.0MiB of page cache no live process maps "
                             "(file 224.0MiB less tmpfs/shm 96.0MiB; active or inactive "
                             "alike)) of limit 512.0MiB: headroom 212.0MiB"), reason
    assert "budget 448.0MiB" in reason
    assert "/dev/shm/lab-srs-pool.7 (96.0MiB in /dev/shm)" in reason
    assert "/dev/shm/x" not in reason
    assert ("pid 99 `python3 -c hog` (holds anon 90.0MiB, mapped file 10.0MiB, shmem 0B)"
            in reason), reason
    assert "pid 98 `old-host` (RSS 5.0MiB)" in reason  # a host that says no more
    assert "the cgroup's anon 150.0MiB, shmem 96.0MiB, file 224.0MiB" in reason
    out |= {"outcome": "deadline", "state": "running"}
    assert failure_reason(out).startswith("daemon 7 still running at the drain deadline")


def test_failure_reason_reads_the_hosts_answer_as_hostile_data() -> None:
    """The guard (on the host) and the drain step (on the controller) say it with one
    function; a field missing or of another type never raises, it shows as "-"."""
    out = {"outcome": "plateau", "working_set": "lots", "memory": [1], "budget": True,
           "holders": {"shm": "x", "processes": [7, {"pid": 9}], "anon": None}}
    reason = failure_reason(out)
    assert reason.startswith("memory stopped falling for None")
    assert ("working set - (usage - less - of page cache no live process maps (file -; "
            "active or inactive alike)) of limit -: headroom -, budget -") in reason, reason
    assert "pid 9 `?` (RSS -)" in reason and "anon -, shmem -, file -" in reason
    hostile = {"memory": {"source": "cgroup-v2", "shmem": "x", "mapped_file": [1]},
               "holders": {"processes": [{"pid": 1, "anon": "lots", "file": None}]}}
    reason = failure_reason(hostile)
    assert "less tmpfs/shm -, mapped -" in reason and "(holds anon -, mapped file -)" in reason
    assert failure_reason({}).startswith("drain deadline passed")


def test_neighbours_are_the_others_by_what_they_hold(tmp_path: Path) -> None:
    """What the facts count as other processes' memory (issue 17): every process charged to
    the cgroup but the daemons, their children and this script's own session; each by what
    it holds, the biggest first."""
    from rollout.host.scripts.common import neighbours

    hog = subprocess.Popen([sys.executable, "-c",
                            "import sys, time; b = b'x' * (24 << 20); print(1, flush=True); "
                            "time.sleep(60)"], stdout=subprocess.PIPE)
    daemon = subprocess.Popen(["sh", "-c", "sleep 60 & wait"])
    try:
        assert hog.stdout is not None and hog.stdout.readline()  # its 24 MiB are in
        children = Path(f"/proc/{daemon.pid}/task/{daemon.pid}/children")
        end = time.monotonic() + 60
        while not children.read_text().split():
            assert time.monotonic() < end
            time.sleep(0.01)
        child = int(children.read_text().split()[0])
        cg = v2_tree(tmp_path, 900 * MIB, limit=str(1 << 30))
        procs = [os.getpid(), hog.pid, daemon.pid, child]
        (cg / "cgroup.procs").write_text("".join(f"{p}\n" for p in procs))
        out = neighbours(str(cg), "cgroup-v2", "/proc", [daemon.pid])
        pids = [p["pid"] for p in out["processes"]]
        assert pids == [hog.pid], out  # not the daemon, its child, nor this session
        top = out["processes"][0]
        assert top["anon"] >= 24 * MIB and top["rss"] == top["anon"] + top["file"] + top["shmem"]
        assert out["bytes"] == top["rss"] and out["count"] == 1
        assert "import sys, time" in top["cmdline"]
    finally:
        for p in (hog, daemon):
            p.kill()
            p.wait()
