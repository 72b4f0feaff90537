"""ops.facts: shape on a fake host tree, and on an empty root; bounded tail reads."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from rollout.host.scripts import script_text
from rollout.host.scripts.actions import facts as facts_mod

OPS = script_text("ops")  # as sent: python3 - --call facts --kwargs JSON < text
PYTHON = os.environ.get("ROLLOUT_HOSTSIDE_PYTHON", sys.executable)
KEYS = {
    "time", "root", "hostname", "python", "cgroup", "meminfo", "daemon", "supervisor", "held",
    "cordoned", "current_release", "previous_release", "digests", "cuzk_processes", "port_owners",
    "registered", "validated", "host_id",
    "releases", "disk", "root_writable",
    "last_exit", "restarts_last_hour", "exits_last_hour", "exit_counts_complete", "last_start",
    "restarts_total", "errors", "neighbours", "cuzk_loops",
}


def starttime(pid: int) -> int:
    return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[19])


def run_facts(root: Path, **kwargs: Any) -> dict[str, Any]:
    """ops.facts as a host without an agent runs it; its report less outcome and reason."""
    call = json.dumps({"root": str(root), **kwargs})
    p = subprocess.run([PYTHON, "-", "--call", "facts", "--kwargs", call], input=OPS,
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    out: dict[str, Any] = json.loads(p.stdout)
    assert (out.pop("outcome"), out.pop("reason")) == ("read", "host facts")
    return out


@pytest.fixture
def tree(tmp_path: Path) -> Iterator[tuple[Path, Path, subprocess.Popen[bytes]]]:
    root = tmp_path / "data"
    for rid in ("aaaaaaaaaaaa", "bbbbbbbbbbbb"):
        (root / "releases" / rid).mkdir(parents=True)
        exe = root / "releases" / rid / "cuzk-daemon"
        exe.write_text("import time\ntime.sleep(30)\n")
    (root / "releases" / "bbbbbbbbbbbb" / "cuzk-bench").write_text("")
    os.utime(root / "releases" / "aaaaaaaaaaaa", (1000, 1000))
    (root / "current").symlink_to("releases/bbbbbbbbbbbb")
    rd = root / "rollout"
    rd.mkdir()
    exe_path = str(root / "releases" / "bbbbbbbbbbbb" / "cuzk-daemon")
    daemon = subprocess.Popen([sys.executable, exe_path])
    (rd / "daemon.pid").write_text(f"{daemon.pid} {starttime(daemon.pid)} {exe_path}\n")
    (rd / "supervisor.py").write_text("import time\ntime.sleep(30)\n")
    supervisor = subprocess.Popen([sys.executable, str(rd / "supervisor.py")])
    (rd / "supervisor.pid").write_text(f"{supervisor.pid} {starttime(supervisor.pid)}\n")
    (rd / "supervisor.json").write_text(json.dumps({"state": "running", "since": 1.0,
                                                    "daemon_pid": daemon.pid, "updated": 2.0}))
    (rd / "hold").write_text("")
    now = time.time()
    lines = [{"time": now - 7200, "pid": 1, "held": False},
             {"time": now - 600, "pid": 2, "held": False},
             {"time": now - 300, "pid": 3, "held": True},
             {"time": now - 60, "pid": 4, "held": False, "signal": "SIGKILL"}]
    (rd / "exits.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines) + "garbage\n")
    (rd / "starts.jsonl").write_text(json.dumps({"time": now, "pid": daemon.pid}) + "\n")
    cg = tmp_path / "cgroup"
    cg.mkdir()
    (cg / "cgroup.controllers").write_text("memory\n")
    (cg / "memory.current").write_text("4096\n")
    (cg / "memory.max").write_text("8192\n")
    (cg / "memory.events").write_text("oom 1\noom_kill 1\n")
    try:
        yield root, cg, daemon
    finally:
        for process in (daemon, supervisor):
            process.kill()
            process.wait()


def test_pidfiles_naming_other_processes_are_not_trusted(
    tree: tuple[Path, Path, subprocess.Popen[bytes]],
) -> None:
    """Real processes with their real start times, but not our daemon nor our supervisor."""
    root, cg, _ = tree
    me = os.getpid()
    (root / "rollout" / "daemon.pid").write_text(f"{me} {starttime(me)}\n")  # no exe named
    (root / "rollout" / "supervisor.pid").write_text(f"{me} {starttime(me)}\n")
    out = run_facts(root, cgroup_root=str(cg))
    assert out["daemon"]["state"] == "gone" and "not trusted" in out["daemon"]["note"]
    assert out["supervisor"]["alive"] is False


def test_shape_on_fake_tree(tree: tuple[Path, Path, subprocess.Popen[bytes]]) -> None:
    root, cg, daemon = tree
    out = run_facts(root, cgroup_root=str(cg))
    assert set(out) == KEYS and out["errors"] == {}
    assert out["cgroup"] == {"version": 2,
                             "memory": {"usage": 4096, "limit": 8192, "source": "cgroup-v2",
                                        "working_set": 4096, "page_cache": None},
                             "oom": {"oom": 1, "oom_kill": 1}}
    assert out["meminfo"]["total"] > 0 and out["meminfo"]["available"] > 0
    d = out["daemon"]
    assert d["pid"] == daemon.pid and d["state"] == "running"
    assert 0 <= d["uptime_secs"] < 60
    assert out["supervisor"]["alive"] is True and out["supervisor"]["state"] == "running"
    assert out["held"] is True
    assert out["current_release"] == "bbbbbbbbbbbb"
    assert [r["id"] for r in out["releases"]] == ["aaaaaaaaaaaa", "bbbbbbbbbbbb"]
    assert out["releases"][1]["has_bench"] and not out["releases"][0]["has_bench"]
    assert out["disk"]["free_bytes"] > 0 and out["root_writable"] is True
    assert not [p for p in os.listdir(root) if p.startswith(".rollout-write-test")]
    assert out["last_exit"]["pid"] == 4 and out["last_exit"]["signal"] == "SIGKILL"
    assert out["restarts_last_hour"] == 2 and out["exits_last_hour"] == 3
    assert out["exit_counts_complete"] is True and out["restarts_total"] == 3
    assert out["last_start"]["pid"] == daemon.pid
    assert out["python"].count(".") == 2 and out["hostname"]


def test_digests_of_named_files(tmp_path: Path) -> None:
    (tmp_path / "a").write_bytes(b"abc")
    (tmp_path / "rollout").mkdir()
    (tmp_path / "rollout" / "previous_release").write_text("aaaaaaaaaaaa")
    out = run_facts(tmp_path, digests=[str(tmp_path / "a"), str(tmp_path / "missing")])
    assert out["digests"] == {
        str(tmp_path / "a"): "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad",
        str(tmp_path / "missing"): None,
    }
    assert out["previous_release"] == "aaaaaaaaaaaa"


def test_daemon_states_zombie_reused_and_wrong_cmdline(
    tree: tuple[Path, Path, subprocess.Popen[bytes]],
) -> None:
    root, cg, daemon = tree
    pidfile = root / "rollout" / "daemon.pid"
    pid, st, exe = pidfile.read_text().split()
    pidfile.write_text(f"{pid} {int(st) + 1} {exe}\n")
    d = run_facts(root, cgroup_root=str(cg))["daemon"]
    assert d["state"] == "gone" and "reused" in d["note"]
    pidfile.write_text(f"{pid} {st} /somewhere/else/cuzk-daemon\n")
    assert run_facts(root)["daemon"]["state"] == "gone"
    daemon.kill()
    end = time.monotonic() + 60  # a safety net on a loaded machine
    while Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z":
        assert time.monotonic() < end
        time.sleep(0.01)
    pidfile.write_text(f"{pid} {st} {exe}\n")
    d = run_facts(root)["daemon"]
    assert d["state"] == "zombie" and d["note"] == f"parent PID {os.getpid()}"
    daemon.wait()
    assert run_facts(root)["daemon"]["state"] == "gone"


def test_empty_root_never_fails(tmp_path: Path) -> None:
    out = run_facts(tmp_path / "missing", cgroup_root=str(tmp_path / "no"),
                    proc=str(tmp_path / "noproc"))
    assert set(out) == KEYS
    assert out["daemon"]["state"] == "none" and out["supervisor"]["alive"] is False
    assert out["cgroup"]["version"] is None and out["meminfo"] == {"total": None,
                                                                   "available": None}
    assert out["current_release"] is None and out["releases"] == []
    assert out["disk"] is None and "disk" in out["errors"]
    assert out["root_writable"] is False and out["held"] is False
    assert out["last_exit"] is None and out["restarts_last_hour"] == 0


def test_v1_cgroup(tmp_path: Path) -> None:
    mem = tmp_path / "memory"
    mem.mkdir()
    (mem / "memory.usage_in_bytes").write_text("10\n")
    (mem / "memory.limit_in_bytes").write_text("9223372036854771712\n")
    (mem / "memory.failcnt").write_text("0\n")
    (mem / "memory.oom_control").write_text("oom_kill_disable 0\nunder_oom 0\noom_kill 2\n")
    c = facts_mod.cgroup(str(tmp_path))
    assert c["version"] == 1 and c["memory"] == {"usage": 10, "limit": None,
                                                 "source": "cgroup-v1", "working_set": 10,
                                                 "page_cache": None}
    assert c["oom"] == {"failcnt": 0, "oom_kill": 2, "under_oom": 0}


def test_big_exits_file_is_read_from_the_end(tmp_path: Path) -> None:
    path = tmp_path / "exits.jsonl"
    now = time.time()
    line = json.dumps({"time": now - 10, "held": False, "pad": "x" * 200}) + "\n"
    path.write_text(line * 20000 + json.dumps({"time": now, "pid": 77}) + "\n")
    lines, whole = facts_mod.tail_lines(str(path), 64 * 1024)
    assert not whole and len(lines) < 400
    assert json.loads(lines[-1])["pid"] == 77
    f = facts_mod.Facts(facts_mod.FactsArgs(str(tmp_path)))
    f.dir = str(tmp_path)
    ex = f.exits()
    assert ex["last_exit"]["pid"] == 77 and ex["count_complete"] is False
    assert ex["restarts_total"] == 20001  # the whole file counted, past the tail read
