"""Two processes (two test workers, a test and the lab) that need one package install it
one after the other: the second finds it installed and runs no apt-get of its own, where
both ran apt-get at once and the second failed on dpkg's lock (a test then skipped)."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

from rollout.lab import apt


def test_concurrent_installs_of_one_package_run_apt_once(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    installed: set[str] = set()
    ran: list[list[str]] = []

    def run(argv: list[str], **_: object) -> object:
        ran.append(argv)
        time.sleep(0.2)  # an install takes a while: the other caller arrives meanwhile
        if "install" in argv:
            installed.add("promtool")
        return type("Done", (), {"returncode": 0, "stderr": ""})()

    monkeypatch.setattr(apt, "APT_LOCK", str(tmp_path / "apt.lock"))
    monkeypatch.setattr("os.geteuid", lambda: 0)
    monkeypatch.setattr(apt.shutil, "which", lambda name: "/x" if name in installed else None)
    monkeypatch.setattr(apt.subprocess, "run", run)
    callers = [threading.Thread(target=apt.ensure_command, args=("promtool", "prometheus"))
               for _ in range(2)]
    for caller in callers:
        caller.start()
    for caller in callers:
        caller.join(timeout=10)
    assert [a[-1] for a in ran] == ["update", "prometheus"]
    assert all("DPkg::Lock::Timeout=600" in a for a in ran)
