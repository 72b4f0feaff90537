"""Pidfiles are never trusted: the host scripts act on a pid only when it is really ours.

Real processes with their real start times stand for what a forged or stale pidfile
names; the scripts run as sent to hosts (python3 - ARGS < script).
"""

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
from test_hostside_drain import run_drain

from rollout.host.scripts import bootstrap, script_text, sized

PYTHON = os.environ.get("ROLLOUT_HOSTSIDE_PYTHON", sys.executable)
RELEASE = "abcdefabcdef"
DAEMON = "import time\nwhile True:\n    time.sleep(0.05)\n"


def starttime(pid: int) -> int:
    return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[19])


def alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def run_script(name: str, *args: str) -> tuple[int, dict[str, Any]]:
    p = subprocess.run([PYTHON, "-", *args], input=script_text(name), capture_output=True,
                       text=True, timeout=60)
    return p.returncode, json.loads(p.stdout.strip().splitlines()[-1])


def call(action: str, **kwargs: Any) -> dict[str, Any]:
    """A host action of ops.py, run as a host without an agent runs it."""
    feed = sized(script_text("ops")) + json.dumps(kwargs).encode()
    p = subprocess.run([PYTHON, "-c", bootstrap("ops.py"), "--call", action, "--kwargs-stdin"],
                       input=feed, capture_output=True, timeout=60)
    assert p.returncode == 0, p.stderr
    out: dict[str, Any] = json.loads(p.stdout.decode().strip().splitlines()[-1])
    return out


class Host:
    def __init__(self, tmp: Path) -> None:
        self.root = tmp / "data"
        self.exe = self.root / "releases" / RELEASE / "cuzk-daemon"
        self.exe.parent.mkdir(parents=True)
        self.exe.write_text(f"#!{sys.executable}\n{DAEMON}")
        self.exe.chmod(0o755)
        (self.root / "rollout").mkdir()
        self.procs: list[subprocess.Popen[bytes]] = []

    def spawn(self, *argv: str) -> int:
        p = subprocess.Popen(list(argv))
        self.procs.append(p)
        return p.pid

    def pidfile(self, name: str, text: str) -> None:
        (self.root / "rollout" / name).write_text(text)

    def stop(self) -> dict[str, Any]:
        return call("stop", root=str(self.root), grace=5)


@pytest.fixture
def host(tmp_path: Path) -> Iterator[Host]:
    h = Host(tmp_path)
    try:
        yield h
    finally:
        for p in h.procs:
            p.kill()
            p.wait()


def test_stop_signals_our_daemon(host: Host) -> None:
    pid = host.spawn(str(host.exe))
    host.pidfile("daemon.pid", f"{pid} {starttime(pid)} {host.exe}\n")
    host.pidfile("supervisor.json", json.dumps({"daemon_pid": pid}))  # the supervisor's record
    out = host.stop()
    assert out["outcome"] == "stopped" and out["pid"] == pid


@pytest.mark.parametrize("names_exe", [False, True])
def test_stop_never_signals_another_process_with_its_real_start_time(
    host: Host, names_exe: bool
) -> None:
    """`tail -f EXE` has the daemon's path in its argv; a pidfile may name no exe at all."""
    victim = host.spawn("tail", "-f", str(host.exe))
    exe = f" {host.exe}" if names_exe else ""
    host.pidfile("daemon.pid", f"{victim} {starttime(victim)}{exe}\n")
    out = host.stop()
    assert out["outcome"] == "untrusted" and "pid" not in out, out
    assert "tail" in out["note"]
    assert alive(victim)


def test_stop_never_signals_a_daemon_outside_the_release_root(host: Host) -> None:
    elsewhere = host.root.parent / "cuzk-daemon"
    elsewhere.write_text(f"#!{sys.executable}\n{DAEMON}")
    elsewhere.chmod(0o755)
    victim = host.spawn(str(elsewhere))
    host.pidfile("daemon.pid", f"{victim} {starttime(victim)} {elsewhere}\n")
    assert host.stop()["outcome"] == "untrusted"
    assert alive(victim)


@pytest.mark.parametrize("pid", [0, 1, -1])
def test_stop_never_acts_on_pid_1_or_below(host: Host, pid: int) -> None:
    start = starttime(1) if pid == 1 else 0
    host.pidfile("daemon.pid", f"{pid} {start} {host.exe}\n")
    out = host.stop()
    assert out["outcome"] == "untrusted" and f"pid {pid} is never" in out["note"]


def test_drain_never_waits_on_pid_1(host: Host) -> None:
    out = run_drain(host.root, pid=1, cgroup_root=str(host.root / "no-cgroup"), budget=1,
                    deadline=30)
    assert out["outcome"] == "drained" and out["state"] == "gone", out


def supervisor_script(host: Host) -> Path:
    path = host.root / "rollout" / "supervisor.py"
    path.write_text(script_text("supervisor"))
    return path


def test_supervisor_stop_never_kills_what_a_forged_pidfile_names(host: Host) -> None:
    supervisor_script(host)
    victim = host.spawn(sys.executable, "-c", DAEMON)
    host.pidfile("supervisor.pid", f"{victim} {starttime(victim)}\n")
    code, out = run_script("supervisor", "--root", str(host.root), "--stop")
    assert out["status"] == "untrusted" and "pid" not in out, out
    assert alive(victim)


def test_supervisor_stop_stops_the_real_supervisor(host: Host) -> None:
    script = supervisor_script(host)
    (host.root / "current").symlink_to(f"releases/{RELEASE}")
    (host.root / "rollout" / "hold").write_text("")  # no daemon: only the supervisor runs
    pid = host.spawn(PYTHON, str(script), "--root", str(host.root))
    pidfile = host.root / "rollout" / "supervisor.pid"
    end = time.monotonic() + 30
    while not pidfile.exists():  # the supervisor writes it once it holds its lock
        assert time.monotonic() < end, "the supervisor never started"
        time.sleep(0.05)
    code, out = run_script("supervisor", "--root", str(host.root), "--stop")
    assert code == 0 and out == {"status": "stopped", "pid": pid}
    host.procs[-1].wait(30)
