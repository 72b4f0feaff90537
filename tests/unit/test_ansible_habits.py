"""Ansible habits that work: `rollout inventory --host HOST` prints what
`ansible-inventory --host HOST` prints, an unknown ansible_* var is warned about with a
did-you-mean, and a relative key path is read from the working directory, as Ansible reads
it (or, missing there, beside the inventory as before, with a warning naming both)."""

from __future__ import annotations

import json
import os
import subprocess
import tempfile
from pathlib import Path
from typing import Any

import pytest
from ansible_recordings import CASES, ansible_inventory_exe, cases, inventory_of, recorded
from conftest import CliRunner

from rollout.commands.inventory_view import describe, host_vars
from rollout.config.inventory import load_inventory


def all_hosts(case: str) -> dict[str, dict[str, Any]]:
    """Every host of a case with its merged vars, as ansible-inventory --list recorded it."""
    listing = recorded(case).listing
    found: dict[str, dict[str, Any]] = dict(listing["_meta"]["hostvars"])
    for name, body in listing.items():
        for host in body.get("hosts", []) if name != "_meta" else []:
            found.setdefault(host, {})
    return found


HOSTS = [(case, host) for case in cases(refused=False) for host in all_hosts(case)]


@pytest.mark.parametrize(("case", "host"), HOSTS)
def test_inventory_host_prints_what_ansible_inventory_host_prints(
    case: str, host: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HOME", str(tmp_path))
    want = json.dumps(all_hosts(case)[host], sort_keys=True, indent=4)
    assert host_vars(str(inventory_of(CASES / case)), host) == want


def test_inventory_host_from_the_command_line(cli: CliRunner, tmp_path: Path) -> None:
    file = str(CASES / "doc-host-vars-ini" / "hosts")
    done = cli("inventory", "--hosts", file, "--host", "host1", env={"HOME": str(tmp_path)})
    assert (done.returncode, json.loads(done.stdout)) == (0, {"http_port": 80,
                                                               "maxRequestsPerChild": 808})
    done = cli("inventory", "--hosts", file, "--host", "nope")
    assert done.returncode == 2 and "unknown host 'nope'" in done.stderr
    done = cli("inventory", "--hosts", file, "--host", "host1", "--graph")
    assert done.returncode == 2 and "without --graph" in done.stderr


def test_inventory_host_of_a_fleet_yaml(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HOME", str(tmp_path))
    fleet = tmp_path / "fleet.yaml"
    fleet.write_text("hosts:\n  - {name: g1, address: 10.0.0.1, port: 2222, user: ops,\n"
                     "     key_file: /k/id, vars: {cuda: '12'}}\n")  # fmt: skip
    assert json.loads(host_vars(str(fleet), "g1")) == {
        "ansible_host": "10.0.0.1", "ansible_port": 2222, "ansible_user": "ops",
        "ansible_ssh_private_key_file": "/k/id", "cuda": "12"}  # fmt: skip


@pytest.mark.slow
def test_ansible_inventory_host_still_answers_as_recorded(tmp_path: Path) -> None:
    exe = ansible_inventory_exe()
    if exe is None:
        pytest.fail("ansible-inventory is not installed (pip install -e '.[dev]')")
    for case, host in [("doc-host-vars-ini", "host1"), ("vars-folders-yaml", None),
                       ("doc-group-vars-yaml", None)]:  # fmt: skip
        name = host or next(iter(all_hosts(case)))
        file = inventory_of(CASES / case)
        with tempfile.TemporaryDirectory(prefix="ansible-") as tmp:
            env = {"PATH": os.environ.get("PATH", ""), "HOME": tmp, "LANG": "C.UTF-8",
                   "ANSIBLE_CONFIG": f"{tmp}/none.cfg", "ANSIBLE_HOME": f"{tmp}/home",
                   "ANSIBLE_LOCAL_TEMP": f"{tmp}/tmp", "ANSIBLE_INVENTORY_ENABLED": "ini,yaml"}
            answer = subprocess.run([exe, "-i", file.name, "--host", name], env=env,
                                    cwd=file.parent, capture_output=True, text=True,
                                    timeout=120, check=True).stdout  # fmt: skip
        assert answer.rstrip("\n") == host_vars(str(file), name), case


def write_inventory(folder: Path, text: str) -> Path:
    file = folder / "hosts"
    file.write_text(text)
    return file


def test_an_unknown_ansible_var_is_warned_with_a_did_you_mean(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    file = write_inventory(tmp_path, "[gpu]\ng1 ansible_prot=2222\ng2 ansible_prot=2223\n"
                                     "[gpu:vars]\nansible_hots=10.0.0.9\n")  # fmt: skip
    (tmp_path / "host_vars").mkdir()
    (tmp_path / "host_vars" / "g1.yml").write_text("ansible_ssh_private_key_fil: k\n")
    inventory = load_inventory(file)
    err = capsys.readouterr().err
    assert f"warning: {file}:2: ansible_prot (and 1 more place): unknown Ansible var, kept as " \
        "a template var; did you mean ansible_port?" in err  # fmt: skip
    assert f"{file}:5: ansible_hots:" in err and "did you mean ansible_host?" in err
    assert "g1.yml:1: ansible_ssh_private_key_fil:" in err
    assert "did you mean ansible_ssh_private_key_file?" in err
    assert err.count("ansible_prot") == 1  # one warning per name
    assert inventory.hosts[0].port == 22 and inventory.hosts[0].vars["ansible_prot"] == 2222


def test_a_var_ansible_knows_and_rollout_ignores_is_a_note_never_a_warning(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    file = write_inventory(tmp_path, "[gpu]\ng1 ansible_timeout=5 ansible_winrm_scheme=https "
                                     "ansible_python_interpreter=/usr/bin/python3 "
                                     "ansible_become=false ansible_become_user=root\n")  # fmt: skip
    load_inventory(file)
    assert "warning" not in capsys.readouterr().err
    notes = describe(str(file)).notes
    assert any(f"{file}:2: ansible_timeout: ignored" in n for n in notes)
    assert not any(n.startswith("warning") for n in notes)


def test_a_relative_key_path_is_read_from_the_working_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "inv").mkdir()
    (tmp_path / "work" / "keys").mkdir(parents=True)
    (tmp_path / "work" / "keys" / "fleet").write_text("key")
    file = write_inventory(tmp_path / "inv", "g1 ansible_ssh_private_key_file=keys/fleet\n")
    monkeypatch.chdir(tmp_path / "work")
    assert load_inventory(file).hosts[0].key_file == tmp_path / "work" / "keys" / "fleet"
    assert "warning" not in capsys.readouterr().err


def test_a_key_found_only_beside_the_inventory_still_loads_with_a_warning(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "inv" / "keys").mkdir(parents=True)
    (tmp_path / "inv" / "keys" / "fleet").write_text("key")
    (tmp_path / "work").mkdir()
    file = write_inventory(tmp_path / "inv", "g1 ansible_ssh_private_key_file=keys/fleet\n")
    monkeypatch.chdir(tmp_path / "work")
    assert load_inventory(file).hosts[0].key_file == tmp_path / "inv" / "keys" / "fleet"
    err = capsys.readouterr().err
    assert f"{file}:1: ansible_ssh_private_key_file: 'keys/fleet' is read beside" in err
    assert str(tmp_path / "work" / "keys" / "fleet") in err and "absolute path" in err
