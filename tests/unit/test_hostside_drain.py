"""drain.py: zombie-aware and memory-aware wait, against fake cgroup trees and real zombies."""

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

from rollout.hostside import drain as drain_mod
from rollout.hostside import script_text

DRAIN = script_text("drain")  # as sent: python3 - ARGS < text
PYTHON = os.environ.get("ROLLOUT_HOSTSIDE_PYTHON", sys.executable)


def stat_of(pid: int) -> list[str]:
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()


def zombie_child() -> subprocess.Popen[bytes]:
    """A child that exits at once and stays a zombie until the test calls wait()."""
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    end = time.monotonic() + 3
    while stat_of(child.pid)[0] != "Z":
        assert time.monotonic() < end
        time.sleep(0.01)
    return child


def v2_tree(tmp: Path, usage: int, limit: str = "1000") -> Path:
    cg = tmp / "cgroup"
    cg.mkdir()
    (cg / "cgroup.controllers").write_text("memory\n")
    (cg / "memory.current").write_text(f"{usage}\n")
    (cg / "memory.max").write_text(f"{limit}\n")
    return cg


def later(delay: float, fn: Callable[[], object], stamps: dict[str, float], key: str) -> None:
    def run() -> None:
        time.sleep(delay)
        fn()
        stamps[key] = time.time()
    threading.Thread(target=run, daemon=True).start()


def run_drain(root: Path, *args: str, timeout: float = 10) -> tuple[int, dict[str, Any]]:
    p = subprocess.run([PYTHON, "-", "--root", str(root), *args], input=DRAIN,
                       capture_output=True, text=True, timeout=timeout)
    lines = p.stdout.strip().splitlines()
    assert len(lines) == 1, p.stdout + p.stderr
    return p.returncode, json.loads(lines[0])


def test_zombie_then_reaped_then_memory_back(tmp_path: Path) -> None:
    cg = v2_tree(tmp_path, 900)
    child = zombie_child()
    starttime = stat_of(child.pid)[19]
    stamps: dict[str, float] = {}
    later(0.6, lambda: child.wait(), stamps, "reaped")
    later(1.0, lambda: (cg / "memory.current").write_text("50\n"), stamps, "memory")
    rc, out = run_drain(tmp_path, "--pid", str(child.pid), "--starttime", starttime,
                        "--cgroup-root", str(cg), "--threshold", "0.1", "--deadline", "5")
    assert rc == 0 and out["outcome"] == "drained"
    assert out["zombie_seen"] is True and out["zombie_note"] is None
    assert out["state_at_start"] == "zombie"
    assert 0.4 <= out["zombie_secs"] <= 0.9
    assert abs(out["reaped_at"] - stamps["reaped"]) < 0.3
    assert -0.05 <= out["memory_back_at"] - stamps["memory"] < 0.3
    assert out["memory"] == {"usage": 50, "limit": 1000, "source": "cgroup-v2"}
    assert out["died_at"] <= out["reaped_at"] <= out["memory_back_at"] <= out["ended"]
    assert 1 <= len(out["samples"]) <= 50 and out["samples"][-1][1] == 50
    recorded = (tmp_path / "rollout" / "drains.jsonl").read_text().splitlines()
    assert json.loads(recorded[-1]) == out


def test_zombie_never_reaped_is_noted_and_drain_goes_on(tmp_path: Path) -> None:
    cg = v2_tree(tmp_path, 10)
    child = zombie_child()
    try:
        rc, out = run_drain(tmp_path, "--pid", str(child.pid), "--cgroup-root", str(cg),
                            "--zombie-grace", "0.4", "--deadline", "5")
    finally:
        child.wait()
    assert rc == 0 and out["outcome"] == "drained"
    assert out["zombie_seen"] and out["reaped_at"] is None
    assert f"(parent PID {os.getpid()})" in out["zombie_note"]
    assert out["zombie_note"].startswith("zombie not reaped after 0.")
    assert 0.4 <= out["zombie_secs"] < 1.5


def test_deadline_exits_3_when_process_keeps_running(tmp_path: Path) -> None:
    cg = v2_tree(tmp_path, 10)
    child = subprocess.Popen(["sleep", "10"])
    try:
        t = time.monotonic()
        rc, out = run_drain(tmp_path, "--pid", str(child.pid), "--cgroup-root", str(cg),
                            "--deadline", "0.5")
        assert time.monotonic() - t < 2.5
    finally:
        child.kill()
        child.wait()
    assert rc == 3 and out["outcome"] == "deadline"
    assert out["died_at"] is None and out["memory_back_at"] is None
    assert out["zombie_seen"] is False and out["state"] == "running"


def test_deadline_when_memory_never_comes_back(tmp_path: Path) -> None:
    cg = v2_tree(tmp_path, 900)
    rc, out = run_drain(tmp_path, "--pid", "999999999", "--cgroup-root", str(cg),
                        "--deadline", "0.3")
    assert rc == 3 and out["outcome"] == "deadline" and out["state"] == "gone"
    assert out["died_at"] is not None and out["memory_back_at"] is None


def test_reused_pid_counts_as_gone(tmp_path: Path) -> None:
    cg = v2_tree(tmp_path, 10)
    rc, out = run_drain(tmp_path, "--pid", str(os.getpid()), "--starttime", "1",
                        "--cgroup-root", str(cg), "--deadline", "3")
    assert rc == 0 and out["state_at_start"] == "gone" and out["ended"] - out["started"] < 0.5


def test_meminfo_fallback_with_fake_proc_and_unlimited_v1(tmp_path: Path) -> None:
    cg = tmp_path / "cgroup" / "memory"
    cg.mkdir(parents=True)
    (cg / "memory.usage_in_bytes").write_text("123456\n")
    (cg / "memory.limit_in_bytes").write_text("9223372036854771712\n")
    proc = tmp_path / "proc"
    (proc / "4242").mkdir(parents=True)
    stat = "4242 (cuzk-daemon) Z 1 4242 4242 0 -1 0 0 0 0 0 0 0 0 0 20 0 1 0 777 0 0\n"
    (proc / "4242" / "stat").write_text(stat)
    meminfo = "MemTotal: 1000 kB\nMemFree: 50 kB\nMemAvailable: {} kB\n"
    (proc / "meminfo").write_text(meminfo.format(100))
    stamps: dict[str, float] = {}
    later(0.3, lambda: (proc / "4242" / "stat").unlink(), stamps, "reaped")
    later(0.7, lambda: (proc / "meminfo").write_text(meminfo.format(950)),
          stamps, "memory")
    rc, out = run_drain(tmp_path, "--pid", "4242", "--starttime", "777", "--proc", str(proc),
                        "--cgroup-root", str(tmp_path / "cgroup"), "--deadline", "5")
    assert rc == 0 and out["zombie_seen"]
    assert out["memory"] == {"usage": 50 * 1024, "limit": 1000 * 1024, "source": "meminfo"}
    assert -0.05 <= out["memory_back_at"] - stamps["memory"] < 0.3
    assert abs(out["reaped_at"] - stamps["reaped"]) < 0.3


def test_memory_sources_and_thresholds(tmp_path: Path) -> None:
    v1 = tmp_path / "v1" / "memory"
    v1.mkdir(parents=True)
    (v1 / "memory.usage_in_bytes").write_text("300\n")
    (v1 / "memory.limit_in_bytes").write_text("1000\n")
    m = drain_mod.memory(str(tmp_path / "v1"), str(tmp_path / "noproc"))
    assert m == {"usage": 300, "limit": 1000, "source": "cgroup-v1"}
    assert not drain_mod.memory_back(m, 0.1, None)
    assert drain_mod.memory_back(m, 0.5, None)
    assert drain_mod.memory_back(m, 0.1, 301) and not drain_mod.memory_back(m, 0.1, 300)
    v2 = v2_tree(tmp_path, 5, limit="max")
    m = drain_mod.memory(str(v2), str(tmp_path / "noproc"))
    assert m["limit"] is None and drain_mod.memory_back(m, 0.1, None)
    mi = {"usage": 200, "limit": 1000, "source": "meminfo"}
    assert not drain_mod.memory_back(mi, 0.1, None) and drain_mod.memory_back(mi, 0.2, None)


def test_thin_keeps_ends_and_at_most_50() -> None:
    samples = [[float(i), i] for i in range(1000)]
    out = drain_mod.thin(samples)
    assert len(out) == 50 and out[0] == [0.0, 0] and out[-1] == [999.0, 999]
    assert drain_mod.thin(samples[:10]) == samples[:10]
