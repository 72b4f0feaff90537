"""An ssh_config's `Match exec "... %h ..."` never runs on the controller: an inventory
address holding shell syntax is refused at load (exit 2, naming the file and line) before
any ssh_config is read, and a normal rollout of the lab with a `Match exec` in its
ssh_config still works, the exec never run (CVE-2023-51385's shape, through paramiko)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from rollout.config.playbook import LAB_PLAYBOOK

from .conftest import LabFleet
from .rollout_helpers import FAST_KNOBS, assert_serving, reset_host, run_cli

pytestmark = pytest.mark.lab

HOSTILE = ["x;touch {file};", "$(touch {file})"]


@pytest.fixture
def home(tmp_path: Path) -> dict[str, str]:
    """A HOME of the test's own (its ~/.ssh/config is the operator's), and the real cache,
    so that the stand-in build is not redone."""
    (tmp_path / "home/.ssh").mkdir(parents=True, mode=0o700)
    cache = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return {"HOME": str(tmp_path / "home"), "XDG_CACHE_HOME": cache}


def match_exec(tmp_path: Path) -> str:
    """An ssh_config whose Match exec would leave a file named after the host, and would
    send every host to port 1 if it ever matched."""
    return f'Match exec "touch {tmp_path}/exec-ran-%h"\n    Port 1\n'


def lab_inventory(work: Path, fleet_path: Path, defaults: str = "", address: str = "") -> Path:
    """The lab inventory, usable from `work`: `defaults` YAML lines added to its defaults,
    and lab-2's address replaced by `address` (a YAML scalar) when given."""
    lab_dir = fleet_path.parent
    text = fleet_path.read_text()
    text = text.replace("key_file: keys/", f"key_file: {lab_dir}/keys/")
    text = text.replace("known_hosts: known_hosts", f"known_hosts: {lab_dir}/known_hosts")
    text = text.replace("defaults:\n", f"defaults:\n{defaults}")
    if address:
        head, marker, tail = text.partition("  - name: lab-2\n")
        text = head + marker + tail.replace("address: 127.0.0.1", f"address: {address}", 1)
    path = work / "fleet.yaml"
    path.write_text(text)
    return path


def ansible_inventory(work: Path, fleet_path: Path, address: str) -> Path:
    lab_dir = fleet_path.parent
    path = work / "inventory.ini"
    path.write_text(f"[lab]\nlab-1 ansible_host=127.0.0.1 ansible_port=22001\n"
                    f"lab-2 ansible_host={address} ansible_port=22003\n\n[all:vars]\n"
                    f"ansible_ssh_private_key_file={lab_dir}/keys/id_ed25519\n"
                    f"rollout_known_hosts={lab_dir}/known_hosts\n")  # fmt: skip
    return path


def line_of(path: Path, text: str) -> int:
    return next(n for n, line in enumerate(path.read_text().splitlines(), 1) if text in line)


@pytest.mark.parametrize("source", ["home", "inventory", "ansible"])
@pytest.mark.parametrize("hostile", HOSTILE)
def test_shell_syntax_in_an_address_is_refused_at_load_and_runs_nothing(
    lab_fleet: LabFleet, tmp_path: Path, home: dict[str, str], source: str, hostile: str
) -> None:
    pwned = tmp_path / "pwned"
    address = hostile.format(file=pwned)
    config = Path(home["HOME"]) / ".ssh/config"
    if source == "inventory":
        config = tmp_path / "ssh_config"
    config.write_text(match_exec(tmp_path))
    if source == "ansible":
        path = ansible_inventory(tmp_path, lab_fleet.fleet_path, f"'{address}'")
        where = f"{path}:{line_of(path, 'lab-2')}: lab-2: ansible_host"
    else:
        named = f"  ssh_config: {config}\n" if source == "inventory" else ""
        path = lab_inventory(tmp_path, lab_fleet.fleet_path, named, f"'{address}'")
        where = f"{path}:{line_of(path, address)}: hosts[1].address"
    for command in (("inventory", "--list"), ("status", "--json")):
        run = run_cli(tmp_path, *command, "--hosts", str(path), env=home)
        assert run.code == 2, run.stdout + run.stderr
        assert where in run.stderr and "not a host name or an IP address" in run.stderr
        assert not pwned.exists() and not list(tmp_path.glob("exec-ran-*"))


def test_a_rollout_with_match_exec_in_ssh_config_works_and_never_runs_it(
    lab_fleet: LabFleet, tmp_path: Path, home: dict[str, str]
) -> None:
    for host in lab_fleet.hosts:
        reset_host(host.name)
    operators = Path(home["HOME"]) / ".ssh/config"
    operators.write_text(match_exec(tmp_path))
    path = lab_inventory(tmp_path, lab_fleet.fleet_path)  # reads ~/.ssh/config
    listed = run_cli(tmp_path, "inventory", "--list", "--hosts", str(path), env=home)
    assert listed.code == 0, listed.stderr
    assert f"warning: {operators}:1: Match exec is not run" in listed.stderr
    config = tmp_path / "ssh_config"
    config.write_text(f"{match_exec(tmp_path)}Host *\n    ServerAliveInterval 5\n")
    path = lab_inventory(tmp_path, lab_fleet.fleet_path, f"  ssh_config: {config}\n")
    run = run_cli(tmp_path, "rollout", "--hosts", str(path), "--set", "version=exec-1",
                  "--playbook", str(LAB_PLAYBOOK), "--set", f"lab_knobs={FAST_KNOBS}", env=home)
    assert run.code == 0, run.stderr[-3000:]
    assert f"warning: {config}:1: Match exec is not run" in run.stderr
    for host in lab_fleet.hosts:
        assert run.host_end(host.name)["status"] == "validated"
        assert assert_serving(host.name) == "exec-1"
    assert not list(tmp_path.glob("exec-ran-*"))
