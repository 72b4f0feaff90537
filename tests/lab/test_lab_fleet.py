"""The lab fleet itself: reachable with plain OpenSSH from its inventory, isolated hosts,
memory limits visible in the cgroup files, clean teardown, and fast start-up."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import docker
import pytest
from ruamel.yaml import YAML

from rollout import lab
from rollout.config.playbook import LAB_PLAYBOOK
from rollout.errors import TransportError, UserError
from rollout.lab.fleet import wait_for_ssh

from .conftest import LabFleet
from .rollout_helpers import reset_host

CGROUP_LIMIT = (
    "cat /sys/fs/cgroup/memory/memory.limit_in_bytes 2>/dev/null || cat /sys/fs/cgroup/memory.max"
)


def inventory(fleet: LabFleet) -> dict[str, Any]:
    data: dict[str, Any] = YAML(typ="safe").load(fleet.fleet_path.read_text())
    return data


def ssh(fleet_path: Path, entry: dict[str, Any], defaults: dict[str, Any], command: str,
        timeout: float = 20) -> subprocess.CompletedProcess[str]:
    base = fleet_path.parent
    argv = [
        "ssh", "-i", str(base / defaults["key_file"]),
        "-o", f"UserKnownHostsFile={base / defaults['known_hosts']}",
        "-o", "StrictHostKeyChecking=yes", "-o", "BatchMode=yes", "-o", "ConnectTimeout=5",
        "-p", str(entry["port"]), f"{defaults['user']}@{entry['address']}", command,
    ]  # fmt: skip
    return subprocess.run(argv, capture_output=True, text=True, timeout=timeout, check=False)


@pytest.mark.lab
def test_inventory_is_in_the_users_format(lab_fleet: LabFleet) -> None:
    data = inventory(lab_fleet)
    assert lab_fleet.fleet_path.read_text().startswith("# Lab fleet written by `inv lab.up`.\n")
    assert data["defaults"] == {"user": "root", "key_file": "keys/id_ed25519",
                                "known_hosts": "known_hosts", "host_key_policy": "strict"}
    assert [h["name"] for h in data["hosts"]] == ["lab-1", "lab-2", "lab-3"]
    assert data["playbook"] == str(LAB_PLAYBOOK)  # never the real default, never a real host
    for host in data["hosts"]:
        assert host["address"] == "127.0.0.1" and host["port"] % 2 == 1
        assert host["groups"] == ["lab"] and host["vars"] == {"memory_limit": "512m"}
    known = (lab_fleet.fleet_path.parent / "known_hosts").read_text().splitlines()
    expected = [f"[127.0.0.1]:{h['port']}" for h in data["hosts"]]
    assert [line.split()[0] for line in known] == expected
    assert all(line.split()[1] == "ssh-ed25519" for line in known)


@pytest.mark.lab
def test_each_host_reached_with_plain_openssh(lab_fleet: LabFleet) -> None:
    data = inventory(lab_fleet)
    for host in lab_fleet.hosts:
        reset_host(host.name)  # whatever tests ran before on this session's lab
    for entry in data["hosts"]:
        done = ssh(lab_fleet.fleet_path, entry, data["defaults"],
                   f"hostname > /data/whoami && {CGROUP_LIMIT}")
        assert done.returncode == 0, done.stderr
        assert int(done.stdout.split()[0]) == 512 << 20
    for entry in data["hosts"]:
        done = ssh(lab_fleet.fleet_path, entry, data["defaults"],
                   "cat /data/whoami; pgrep -x cuzk-daemon || echo no-daemon; "
                   "cat /proc/1/comm; command -v curl python3 ps")
        lines = done.stdout.split()
        assert lines[0] == entry["name"]  # its own /data
        assert lines[1] == "no-daemon"
        assert lines[2] == "lab-init"  # PID 1 is not a daemon's parent
        assert len(lines) == 6


@pytest.mark.lab
def test_password_login_is_refused(lab_fleet: LabFleet) -> None:
    entry = inventory(lab_fleet)["hosts"][0]
    known = lab_fleet.fleet_path.parent / "known_hosts"
    done = subprocess.run(
        ["ssh", "-o", f"UserKnownHostsFile={known}", "-o", "StrictHostKeyChecking=yes",
         "-o", "BatchMode=yes", "-o", "PreferredAuthentications=password",
         "-o", "IdentitiesOnly=yes", "-p", str(entry["port"]), "root@127.0.0.1", "true"],
        capture_output=True, text=True, timeout=20, check=False,
    )  # fmt: skip
    assert done.returncode == 255 and "Permission denied" in done.stderr


@pytest.mark.lab
def test_status_lists_the_hosts(lab_fleet: LabFleet) -> None:
    hosts = lab.status()
    assert [h["name"] for h in hosts] == ["lab-1", "lab-2", "lab-3"]
    assert all(h["state"] == "running" and h["memory_limit"] == 512 << 20 for h in hosts)
    assert [h["port"] for h in hosts] == [h.port for h in lab_fleet.hosts]


@pytest.mark.lab
def test_data_survives_a_restart(lab_fleet: LabFleet) -> None:
    name = lab_fleet.hosts[-1].name
    assert lab.exec_on(name, "echo kept > /data/marker")[0] == 0
    lab.restart_host(name)
    assert lab.exec_on(name, "cat /data/marker")[1].strip() == "kept"
    data = inventory(lab_fleet)
    done = ssh(lab_fleet.fleet_path, data["hosts"][-1], data["defaults"], "true")
    assert done.returncode == 0, done.stderr  # same host key after a restart


@pytest.mark.lab
def test_pause_and_sshd_stop_make_a_host_unreachable(lab_fleet: LabFleet) -> None:
    host = lab_fleet.hosts[1]
    lab.pause_host(host.name)
    try:
        with pytest.raises(TransportError):
            wait_for_ssh(host.port, timeout=1.5)
    finally:
        lab.unpause_host(host.name)
    wait_for_ssh(host.port)
    lab.stop_sshd(host.name)
    with pytest.raises(TransportError):
        wait_for_ssh(host.port, timeout=1.5)
    lab.start_sshd(host.name)
    wait_for_ssh(host.port)


@pytest.mark.lab
def test_poking_an_unknown_host_is_a_user_error(lab_fleet: LabFleet) -> None:
    for poke in (lab.recreate_host, lab.restart_host, lab.pause_host, lab.stop_sshd):
        with pytest.raises(UserError, match="no lab host 'lab-99' \\(is the lab up\\?\\)"):
            poke("lab-99")
    assert [h["name"] for h in lab.status()] == ["lab-1", "lab-2", "lab-3"]


def test_engine_at_docker_host_that_does_not_answer_is_never_started(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from rollout.errors import EnvironmentProblem
    from rollout.lab import engine

    monkeypatch.setattr(engine, "_client", lambda: docker.errors.DockerException("down"))
    monkeypatch.setenv("DOCKER_HOST", "tcp://127.0.0.1:9")
    monkeypatch.setattr(engine, "_start_dockerd", lambda: pytest.fail("started dockerd"))
    with pytest.raises(EnvironmentProblem, match="DOCKER_HOST=tcp://127.0.0.1:9 does not"):
        engine.ensure_engine()


def lab_leftovers(client: docker.DockerClient) -> list[str]:
    prefix = lab.lab_prefix()

    def ours(name: str) -> bool:  # rl-i10-lab-1 and rl-i10 are this lab's; rl-i10b-* is not
        return name == prefix or name.startswith(f"{prefix}-")

    names = [c.name for c in client.containers.list(all=True) if ours(c.name)]
    names += [v.name for v in client.volumes.list() if ours(v.name)]
    names += [n.name for n in client.networks.list() if ours(n.name)]
    return names


@pytest.mark.lab
def test_down_leaves_nothing_and_8_hosts_come_up_fast(
    lab_fleet: LabFleet, docker_client: docker.DockerClient
) -> None:
    """Runs last in this module: it replaces the session's fleet, then restores it."""
    dead = docker_client.containers.create("rollout-lab/base:latest", command=["true"],
                                           name=f"{lab.lab_prefix()}-stale",
                                           labels={"rollout.lab": lab.lab_prefix()})
    assert dead.status == "created"
    seconds = lab.bench_lab_up(8)  # up 8 (removing the stale leftover first), then down
    assert seconds < 30, f"lab.up --hosts 8 took {seconds:.1f} s"
    assert lab_leftovers(docker_client) == []
    for cmd in (["docker", "ps", "-a"], ["docker", "volume", "ls"], ["docker", "network", "ls"]):
        out = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout
        assert f"{lab.lab_prefix()}-" not in out and lab.lab_prefix() not in out.split()
    lab_fleet.refresh(lab.up(3))
    assert len(lab_fleet.hosts) == 3


def test_engine_down_and_not_root_is_a_clear_environment_problem(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from rollout.errors import EnvironmentProblem
    from rollout.lab import engine

    monkeypatch.setattr(engine, "_client", lambda: docker.errors.DockerException("down"))
    monkeypatch.delenv("DOCKER_HOST", raising=False)
    monkeypatch.setattr("os.geteuid", lambda: 1000)
    with pytest.raises(EnvironmentProblem, match="Docker is not running .* starts dockerd itself"):
        engine.ensure_engine()


def test_engine_down_as_root_installs_and_starts_dockerd(monkeypatch: pytest.MonkeyPatch) -> None:
    from rollout.lab import engine

    calls: list[str] = []
    down = docker.errors.DockerException("down")
    answers = iter([down, down, "client"])
    monkeypatch.setattr(engine, "_client", lambda: next(answers))
    monkeypatch.delenv("DOCKER_HOST", raising=False)
    monkeypatch.setattr("os.geteuid", lambda: 0)
    monkeypatch.setattr(engine, "ensure_command", lambda cmd, pkg: calls.append(f"install {pkg}"))
    monkeypatch.setattr("subprocess.Popen", lambda *a, **k: calls.append("dockerd"))
    monkeypatch.setattr(engine, "DOCKERD_LOG", "/dev/null")
    monkeypatch.setattr("time.sleep", lambda s: None)
    assert engine.ensure_engine() == "client"
    assert calls == ["install docker.io", "dockerd"]


def test_missing_debootstrap_is_installed_with_apt(monkeypatch: pytest.MonkeyPatch) -> None:
    from rollout.lab import apt

    ran: list[list[str]] = []
    installed: set[str] = set()

    def run(argv: list[str], **_: object) -> object:
        ran.append(argv)
        if "install" in argv:
            installed.add("debootstrap")
        return type("Done", (), {"returncode": 0, "stderr": ""})()

    monkeypatch.setattr("os.geteuid", lambda: 0)
    monkeypatch.setattr(apt.shutil, "which", lambda name: "/x" if name in installed else None)
    monkeypatch.setattr(apt.subprocess, "run", run)
    apt.ensure_command("debootstrap", "debootstrap")
    wait = ["-o", "DPkg::Lock::Timeout=600"]
    assert ran == [["apt-get", *wait, "update"], ["apt-get", *wait, "install", "-y", "debootstrap"]]
