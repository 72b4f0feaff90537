"""host/scripts/diagnose.py: bounded reads of a huge log, run markers, cgroup counters, caps."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from rollout.host.scripts import diagnose as diag_mod
from rollout.host.scripts import script_text

SCRIPT = script_text("diagnose").encode()  # as sent: python3 - ARGS < text
PYTHON = os.environ.get("ROLLOUT_HOSTSIDE_PYTHON", sys.executable)
GIB = 1 << 30
START = "=== rollout supervisor: starting release r1: /data/current/cuzk-daemon -c x\n"


def run(root: Path, *args: str) -> tuple[dict[str, Any], int]:
    p = subprocess.run([PYTHON, "-", "--root", str(root), "--kmsg", str(root / "nokmsg"),
                        "--cgroup-root", str(root / "cg"), *args],
                       input=SCRIPT, capture_output=True, timeout=120)
    assert p.returncode == 0, p.stderr
    return json.loads(p.stdout), len(p.stdout) + len(p.stderr)


def state_dir(tmp_path: Path) -> Path:
    d = tmp_path / "rollout"
    d.mkdir()
    return d


def test_a_1gib_log_is_read_from_its_end_only(tmp_path: Path) -> None:
    log = state_dir(tmp_path) / "daemon.log"
    with open(log, "wb") as f:
        f.truncate(GIB)  # sparse: what a whole-file read would still have to send
        f.seek(GIB)
        f.write(START.encode() + b"INFO working\n" * 5000 + ("x" * 5000 + " failed\n").encode())
        f.write(b"thread 'main' panicked at src/main.rs:1:1:\nboom\n" + b"INFO tail\n" * 100)
    out, size = run(tmp_path)
    assert size < 300 * 1024
    scanned = out["log"]["files"][0]
    assert scanned["size"] > GIB and not scanned["whole"]
    assert scanned["scanned_bytes"] <= 4 << 20
    lines = [m["line"] for m in out["log"]["matches"]]
    assert any("panicked at" in ln for ln in lines)
    assert all(len(ln) < 400 for ln in lines)  # line-length cap
    assert len(out["log"]["tail"]) == 40 and out["log"]["tail"][-1]["line"] == "INFO tail"


def test_matches_are_capped_and_the_output_fits_the_cap(tmp_path: Path) -> None:
    log = state_dir(tmp_path) / "daemon.log"
    log.write_text(("ERROR job failed: " + "y" * 2000 + "\n") * 5000)
    out, size = run(tmp_path, "--output-cap", "20000")
    assert size < 25000
    assert len(out["log"]["matches"]) <= 40 and out["log"]["matches_capped"]


def test_runs_are_counted_back_from_the_last_start_marker(tmp_path: Path) -> None:
    d = state_dir(tmp_path)
    (d / "daemon.log.1").write_text(START + "thread 'main' panicked at a.rs:1:1:\n")
    (d / "daemon.log").write_text(START + "INFO ready\n" + START + "FATAL no GPU\n")
    (d / "exits.jsonl").write_text("".join(json.dumps({"time": t, "exit_code": 1}) + "\n"
                                           for t in range(30)))
    out, _ = run(tmp_path)
    runs = {m["line"]: m["run"] for m in out["log"]["matches"]}
    assert runs == {"thread 'main' panicked at a.rs:1:1:": 2, "FATAL no GPU": 0}
    assert [e["time"] for e in out["exits"]] == list(range(10, 30))
    assert out["kernel"]["readable"] is False


def test_cgroup_v1_and_v2_counters(tmp_path: Path) -> None:
    v1 = tmp_path / "cg" / "memory"
    v1.mkdir(parents=True)
    for name, text in {"memory.usage_in_bytes": "100", "memory.limit_in_bytes": "512",
                       "memory.failcnt": "7", "memory.max_usage_in_bytes": "500",
                       "memory.oom_control": "oom_kill_disable 0\nunder_oom 0\noom_kill 2\n"
                       }.items():
        (v1 / name).write_text(text)
    out, _ = run(tmp_path)
    assert out["cgroup"]["failcnt"] == 7 and out["cgroup"]["oom_control"]["oom_kill"] == 2
    v2 = tmp_path / "v2"
    (v2 / "cg").mkdir(parents=True)
    for name, text in {"memory.current": "100", "memory.max": "max",
                       "memory.events": "low 0\nhigh 0\nmax 3\noom 1\noom_kill 1\n"}.items():
        (v2 / "cg" / name).write_text(text)
    out, _ = run(v2)
    assert out["cgroup"]["version"] == 2 and out["cgroup"]["events"]["oom_kill"] == 1


def test_kernel_records_get_wall_times() -> None:
    rec = diag_mod.kernel_record(b"3,120,5000000,-;Out of memory: Killed process 9 (cuzk)\n",
                                 1000.0, 300)
    assert rec == {"time": 1005.0, "line": "Out of memory: Killed process 9 (cuzk)"}


def test_the_old_log_a_host_var_names_is_scanned_too(tmp_path: Path) -> None:
    (tmp_path / "rollout").mkdir()
    old = tmp_path / "cuzk-daemon.log"
    old.write_text("INFO ready\nthread 'main' panicked at src/srs.rs:12\nlast words\n")
    out, _ = run(tmp_path, "--old-log", str(old))
    assert [t["line"] for t in out["old_log"]["tail"]][-1] == "last words"
    assert any("panicked" in m["line"] for m in out["old_log"]["matches"])
    assert "old_log" not in run(tmp_path)[0]
