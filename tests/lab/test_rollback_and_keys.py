"""Fleet-wide manual rollback, and host keys: unknown refused unless accept-new, changed
always refused. All on real sshd and real hosts of the lab."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from rollout import lab
from rollout.commands import app
from rollout.config.inventory import load_inventory
from rollout.errors import HostKeyError

from .conftest import LabFleet
from .rollout_helpers import (
    assert_serving,
    daemon_pid,
    read_events,
    reset_host,
    run_cli,
    sh,
)

pytestmark = pytest.mark.lab
FAST = ("--set", "lab_knobs={pool_mib: 32, load_secs: 0.3, drain_mib_per_sec: 256, "
        "prove_secs: 0.1}", "--set", "ready_timeout=15")
HOSTS = ["lab-1", "lab-2", "lab-3"]


def test_rollback_command_takes_the_fleet_back(lab_fleet: LabFleet, tmp_path: Path) -> None:
    for host in HOSTS:
        reset_host(host)
    for version in ("r1", "r2"):
        run = run_cli(tmp_path, "rollout", "--hosts", str(lab_fleet.fleet_path),
                      "--set", f"version={version}", *FAST)
        assert run.code == 0, run.stderr[-3000:]
    r2 = sh("lab-1", "readlink /data/current").strip().rsplit("/", 1)[-1]
    back = run_cli(tmp_path, "rollback", "--hosts", str(lab_fleet.fleet_path),
                   "--json", str(tmp_path / "rollback.jsonl"))
    assert back.code == 0, back.stderr[-3000:]
    assert {h: assert_serving(h) for h in HOSTS} == dict.fromkeys(HOSTS, "r1")
    assert "validation proof COMPLETED" in (tmp_path / "rollback.jsonl").read_text()
    # r2's daemon on lab-2 no longer matches its manifest: lab-2 is refused, untouched
    sh("lab-2", f"printf x >> /data/releases/{r2}/cuzk-daemon")
    pid = daemon_pid("lab-2")
    forward = run_cli(tmp_path, "rollback", "--hosts", str(lab_fleet.fleet_path), "--to", r2,
                      "--json", str(tmp_path / "forward.jsonl"))
    assert forward.code == 1, forward.stderr[-3000:]
    ends = {e["host"]: e for e in read_events(tmp_path / "forward.jsonl")
            if e["kind"] == "host_end"}  # fmt: skip
    assert ends["lab-2"]["status"] == "failed", ends["lab-2"]
    assert "cuzk-daemon does not match RELEASE.json" in ends["lab-2"]["reason"]
    assert daemon_pid("lab-2") == pid and assert_serving("lab-2") == "r1"
    assert assert_serving("lab-1") == "r2" and assert_serving("lab-3") == "r2"


def test_the_installed_command_works_outside_the_repository(
    lab_fleet: LabFleet, tmp_path: Path
) -> None:
    """From any folder: the packaged playbook, Dockerfiles and host scripts are used."""
    run = run_cli(tmp_path, "rollout", "--hosts", str(lab_fleet.fleet_path), "--dry-run",
                  cwd=tmp_path)
    assert run.code == 0, run.stderr[-3000:]
    assert "lab-1: release" in run.stdout and "validate (validate) would run" in run.stdout


def _host(fleet: LabFleet, name: str, **changes: object):  # type: ignore[no-untyped-def]
    host = next(h for h in load_inventory(fleet.fleet_path).hosts if h.name == name)
    return replace(host, **changes)  # type: ignore[arg-type]


def test_unknown_host_key_refused_unless_accept_new(lab_fleet: LabFleet, tmp_path: Path) -> None:
    empty = tmp_path / "known_hosts"
    empty.write_text("")
    with pytest.raises(HostKeyError, match="host key unknown"):
        app.connect(_host(lab_fleet, "lab-1", known_hosts=empty))
    assert empty.read_text() == ""
    transport = app.connect(_host(lab_fleet, "lab-1", known_hosts=empty,
                                  host_key_policy="accept-new"))
    transport.close()
    port = _host(lab_fleet, "lab-1").port
    assert f"[127.0.0.1]:{port} ssh-ed25519 " in empty.read_text()


def test_changed_host_key_is_always_refused(lab_fleet: LabFleet, tmp_path: Path) -> None:
    lab.recreate_host("lab-2", update_known_hosts=False)
    try:
        for policy in ("strict", "accept-new"):
            with pytest.raises(HostKeyError, match="CHANGED"):
                app.connect(_host(lab_fleet, "lab-2", host_key_policy=policy))
        run = run_cli(tmp_path, "status", "--hosts", str(lab_fleet.fleet_path))
        assert "unreachable" in run.stdout
    finally:
        lab.recreate_host("lab-2")
