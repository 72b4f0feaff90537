"""rollout reads each inventory under tests/unit/inventories/ as ansible-inventory does:
the same hosts, the same groups for each host, the same merged vars (inventory file,
group_vars/ and host_vars/, precedence and ansible_group_priority), and connection fields
taken from those vars. A case with a `refused.txt` is one rollout refuses, by that name.

The cases include the INI and YAML examples of Ansible's own documentation
(docs/docsite/rst/inventory_guide/intro_inventory.rst, ansible/ansible-documentation)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from rollout.commands.inventory_view import as_graph, describe
from rollout.config.ansible import NOT_TEMPLATE_VARS, SSH_ARGS_VARS, merge
from rollout.config.ansible_vars import read_ansible
from rollout.config.inventory import load_inventory
from rollout.errors import ConfigError

CASES = Path(__file__).parent / "inventories"
NOT_INVENTORY = {"group_vars", "host_vars", "refused.txt"}
ANSIBLE_INVENTORY = Path(sys.executable).parent / "ansible-inventory"


def inventory_of(case: Path) -> Path:
    (file,) = [p for p in case.iterdir() if p.name not in NOT_INVENTORY]
    return file


def cases(refused: bool) -> list[str]:
    return sorted(p.name for p in CASES.iterdir() if (p / "refused.txt").exists() == refused)


def ansible_inventory(file: Path, tmp: Path) -> dict[str, Any]:
    """`ansible-inventory -i FILE --list`, with no config, home or temp writes outside tmp."""
    if not ANSIBLE_INVENTORY.exists() and shutil.which("ansible-inventory") is None:
        pytest.skip("ansible-inventory is not installed (pip install -e '.[dev]')")
    exe = str(ANSIBLE_INVENTORY) if ANSIBLE_INVENTORY.exists() else "ansible-inventory"
    (tmp / "ansible.cfg").write_text("")
    env = {
        "PATH": os.environ.get("PATH", ""), "HOME": str(tmp), "LANG": "C.UTF-8",
        "ANSIBLE_CONFIG": str(tmp / "ansible.cfg"), "ANSIBLE_HOME": str(tmp / "home"),
        "ANSIBLE_LOCAL_TEMP": str(tmp / "tmp"), "ANSIBLE_INVENTORY_ENABLED": "ini,yaml",
        "ANSIBLE_INVENTORY_UNPARSED_FAILED": "1", "ANSIBLE_NOCOLOR": "1",
    }  # fmt: skip
    done = subprocess.run([exe, "-i", str(file), "--list"], env=env, cwd=tmp,
                          capture_output=True, text=True, timeout=120)  # fmt: skip
    assert done.returncode == 0, done.stderr
    return dict(json.loads(done.stdout))


def ansible_groups(listing: dict[str, Any]) -> dict[str, set[str]]:
    """Every group each host is in, directly or through children (without `all`)."""
    def hosts_under(group: str) -> set[str]:
        body = listing.get(group, {})
        found = set(body.get("hosts", []))
        for child in body.get("children", []):
            found |= hosts_under(child)
        return found

    out: dict[str, set[str]] = {name: set() for name in listing["_meta"]["hostvars"]}
    for group in listing:
        if group not in ("_meta", "all"):
            for host in hosts_under(group):
                out.setdefault(host, set()).add(group)
    return out


def ansible_graph(listing: dict[str, Any]) -> str:
    """The tree `ansible-inventory --graph` draws, from its --list output (same order)."""
    lines = ["@all:"]

    def walk(group: str, depth: int) -> None:
        body = listing.get(group, {})
        for child in body.get("children", []):
            lines.append("  |" * depth + f"--@{child}:")
            walk(child, depth + 1)
        if group != "all":
            lines.extend("  |" * depth + f"--{host}" for host in body.get("hosts", []))

    walk("all", 1)
    return "\n".join(lines)


@pytest.fixture(scope="module")
def listings(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, Any]]:
    """ansible-inventory's reading of every case, run side by side (one process each)."""
    names = cases(refused=False)
    tmps = [tmp_path_factory.mktemp(name) for name in names]
    with ThreadPoolExecutor(max_workers=os.cpu_count() or 2) as pool:
        found = pool.map(ansible_inventory, [inventory_of(CASES / n) for n in names], tmps)
        return dict(zip(names, found, strict=True))


@pytest.mark.parametrize("case", cases(refused=False))
def test_rollout_reads_it_as_ansible_inventory_does(
    case: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
    listings: dict[str, dict[str, Any]],
) -> None:  # fmt: skip
    monkeypatch.setenv("HOME", str(tmp_path))  # no ~/.ssh/config of this machine
    file = inventory_of(CASES / case)
    listing = listings[case]
    hostvars: dict[str, dict[str, Any]] = listing["_meta"]["hostvars"]
    for name in ansible_groups(listing):
        hostvars.setdefault(name, {})
    parsed = read_ansible(file)
    assert parsed is not None
    merged = {host.name: {k: v.value for k, v in host.vars.items()} for host in merge(parsed)}
    assert merged == hostvars
    assert as_graph(describe(str(file))) == ansible_graph(listing)
    hosts = {h.name: h for h in load_inventory(file).hosts}
    assert list(hosts) == list(merged)  # declaration order
    groups = ansible_groups(listing)
    for name, host in hosts.items():
        want = hostvars[name]
        assert set(host.groups) == groups[name] - {"ungrouped"}, name
        assert host.address == want.get("ansible_host", name)
        assert (host.port, host.user) == (want.get("ansible_port", 22),
                                          want.get("ansible_user", "root"))  # fmt: skip
        key = want.get("ansible_ssh_private_key_file")
        assert (None if host.key_file is None else str(host.key_file)) == key
        assert bool(host.proxy_jump) == any(v in want for v in SSH_ARGS_VARS)
        assert dict(host.vars) == {k: v for k, v in want.items() if k not in NOT_TEMPLATE_VARS}


@pytest.mark.parametrize("case", cases(refused=True))
def test_rollout_refuses_it_by_name(case: str, tmp_path: Path,
                                    monkeypatch: pytest.MonkeyPatch) -> None:  # fmt: skip
    monkeypatch.setenv("HOME", str(tmp_path))
    file = inventory_of(CASES / case)
    expected = (CASES / case / "refused.txt").read_text().strip()
    with pytest.raises(ConfigError) as caught:
        load_inventory(file)
    assert expected in str(caught.value) and str(file) in str(caught.value)
    assert caught.value.exit_code == 2
