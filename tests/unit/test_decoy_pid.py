"""A decoy named by daemon.pid (issue 28): a process whose executable lives under
<root>/releases (a copy of the daemon run by hand) but that the supervisor did not start.
Its pid, its real start time and its executable written to daemon.pid are not enough: the
daemon is the one the supervisor's own record (supervisor.json) names, by pid, start time
and executable. Real processes; the scripts run as sent to hosts."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from test_hostside_facts import run_facts
from test_hostside_pidfiles import PYTHON, Host, alive, host, starttime  # noqa: F401

from rollout.host.scripts import script_text


def record(h: Host, pid: int | None, **extra: Any) -> None:
    """The supervisor's record of its daemon, as supervisor.py writes it."""
    doc = {"state": "running", "daemon_pid": pid, "updated": time.time(), **extra}
    (h.root / "rollout" / "supervisor.json").write_text(json.dumps(doc))


def name_in_pidfile(h: Host, pid: int, exe: bool = True) -> None:
    h.pidfile("daemon.pid", f"{pid} {starttime(pid)}" + (f" {h.exe}\n" if exe else "\n"))


def facts(h: Host) -> dict[str, Any]:
    """The daemon ops.facts reads on the host, as the host runs it."""
    daemon: dict[str, Any] = run_facts(h.root, cgroup_root=str(h.root / "no-cgroup"))["daemon"]
    return daemon


@pytest.mark.parametrize("exe", [True, False], ids=["exe-named", "no-exe"])
@pytest.mark.parametrize("recorded", ["none", "real-daemon", "old-start"])
def test_a_decoy_under_releases_is_never_signalled(host: Host, exe: bool,  # noqa: F811
                                                  recorded: str) -> None:
    real = host.spawn(str(host.exe))  # the daemon the supervisor started
    decoy = host.spawn(str(host.exe))  # the same executable, started by hand
    if recorded == "real-daemon":
        record(host, real, daemon_starttime=starttime(real), daemon_exe=str(host.exe))
    elif recorded == "old-start":  # the decoy's pid, another start: a reused pid
        record(host, decoy, daemon_starttime=starttime(decoy) - 1, daemon_exe=str(host.exe))
    name_in_pidfile(host, decoy, exe)
    out = host.stop()
    assert out["outcome"] == "untrusted" and "pid" not in out, out
    assert "nothing signalled" in out["reason"]
    assert alive(decoy) and alive(real)
    seen = facts(host)
    assert seen["state"] == "gone" and "not trusted" in seen["note"], seen


def test_the_daemon_the_supervisor_records_is_stopped(host: Host) -> None:  # noqa: F811
    pid = host.spawn(str(host.exe))
    record(host, pid, daemon_starttime=starttime(pid), daemon_exe=str(host.exe))
    name_in_pidfile(host, pid)
    assert facts(host)["state"] == "running"
    out = host.stop()
    assert out["outcome"] == "stopped" and out["pid"] == pid, out


def test_an_older_supervisors_record_names_the_pid_alone(host: Host) -> None:  # noqa: F811
    """A supervisor started by an earlier rollout records daemon_pid only: still trusted."""
    pid = host.spawn(str(host.exe))
    record(host, pid)
    name_in_pidfile(host, pid)
    assert host.stop()["outcome"] == "stopped"


def test_the_supervisor_records_its_daemon_and_adopts_no_decoy(tmp_path: Path) -> None:
    """The real supervisor writes pid, start time and executable into its record; a new
    supervisor adopts the daemon that record names, never a decoy daemon.pid names."""
    h = Host(tmp_path)
    (h.root / "current").symlink_to(h.exe.parent)
    args = [PYTHON, str(h.root / "rollout" / "supervisor.py"), "--root", str(h.root),
            "--cgroup-root", str(h.root / "no-cgroup"), "--poll-interval", "0.05"]
    (h.root / "rollout" / "supervisor.py").write_text(script_text("supervisor"))
    sup = subprocess.Popen(args, stderr=subprocess.DEVNULL)
    try:
        doc = wait_for_record(h)
        pid = doc["daemon_pid"]
        assert doc["daemon_starttime"] == starttime(pid) and doc["daemon_exe"] == str(h.exe)
        assert facts(h)["state"] == "running"
        decoy = h.spawn(str(h.exe))
        name_in_pidfile(h, decoy)
        assert h.stop()["outcome"] == "untrusted" and alive(decoy) and alive(pid)
    finally:
        sup.terminate()
        sup.wait(timeout=30)
        for p in h.procs:
            p.kill()
            p.wait()
        subprocess.run(["kill", "-KILL", str(json.loads(
            (h.root / "rollout" / "supervisor.json").read_text())["daemon_pid"] or 0)],
            capture_output=True)


def wait_for_record(h: Host) -> dict[str, Any]:
    end = time.monotonic() + 30
    while time.monotonic() < end:
        try:
            doc: dict[str, Any] = json.loads((h.root / "rollout" / "supervisor.json").read_text())
        except (OSError, ValueError):
            doc = {}
        if doc.get("daemon_pid") and (h.root / "rollout" / "daemon.pid").exists():
            return doc
        time.sleep(0.05)
    raise AssertionError(f"the supervisor never recorded a daemon; {sys.executable}")
