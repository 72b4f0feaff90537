"""An Ansible user's inventory rolls the lab out: --hosts inventory.ini, written from the
lab's fleet.yaml the way an Ansible user would write it."""

from __future__ import annotations

from pathlib import Path

import pytest
from ruamel.yaml import YAML

from rollout.config.playbook import LAB_PLAYBOOK

from .conftest import LabFleet
from .rollout_helpers import FAST_KNOBS, assert_serving, reset_host, run_cli

pytestmark = pytest.mark.lab


def ansible_ini(fleet_path: Path) -> str:
    """The lab fleet as an Ansible INI inventory: one group, connection vars per host,
    the key and known_hosts for all."""
    fleet = YAML(typ="safe").load(fleet_path.read_text())
    lab_dir, defaults = fleet_path.parent, fleet["defaults"]
    lines = ["# the lab fleet, as an Ansible user writes it", "[lab]"]
    for host in fleet["hosts"]:
        extra = " ".join(f"{k}={v}" for k, v in host["vars"].items())
        lines.append(f"{host['name']} ansible_host={host['address']} "
                     f"ansible_port={host['port']} {extra}")  # fmt: skip
    lines += [
        "", "[all:vars]", f"ansible_user={defaults['user']}",
        f"ansible_ssh_private_key_file={lab_dir / defaults['key_file']}",
        f"rollout_known_hosts={lab_dir / defaults['known_hosts']}",
        f"rollout_host_key_policy={defaults['host_key_policy']}",
    ]  # fmt: skip
    return "\n".join(lines) + "\n"


def test_an_ansible_ini_inventory_rolls_the_lab_out(lab_fleet: LabFleet, tmp_path: Path) -> None:
    for host in lab_fleet.hosts:
        reset_host(host.name)
    inventory = tmp_path / "inventory.ini"
    inventory.write_text(ansible_ini(lab_fleet.fleet_path))
    run = run_cli(tmp_path, "rollout", "--hosts", str(inventory), "--set", "version=ansible-1",
                  "--playbook", str(LAB_PLAYBOOK),  # an Ansible inventory names no playbook
                  "--set", f"lab_knobs={FAST_KNOBS}", "--limit", "lab")  # fmt: skip
    assert run.code == 0, run.stderr[-3000:]
    for host in lab_fleet.hosts:
        assert run.host_end(host.name)["status"] == "validated"
        assert assert_serving(host.name) == "ansible-1"
