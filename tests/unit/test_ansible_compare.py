"""rollout reads each inventory under tests/unit/inventories/ as ansible-inventory does:
the same hosts, the same groups for each host, the same merged vars (inventory file,
group_vars/ and host_vars/, precedence and ansible_group_priority), the same --graph, and
connection fields taken from those vars. A case with a `refused.txt` is one rollout refuses,
by that name.

ansible-inventory's answers are recordings (tests/unit/fixtures/ansible/, written by
ansible_recordings.py with the pinned ansible-core), so this tier starts no Ansible process;
the slow test_ansible_recordings_current.py runs ansible-inventory again and checks them.

The cases include the INI and YAML examples of Ansible's own documentation
(docs/docsite/rst/inventory_guide/intro_inventory.rst, ansible/ansible-documentation)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from ansible_recordings import CASES, RECORDINGS, cases, files_of, inventory_of, recorded

from rollout.commands.inventory_view import as_graph, describe
from rollout.config.ansible import NOT_TEMPLATE_VARS, SSH_ARGS_VARS, merge
from rollout.config.ansible_vars import read_ansible
from rollout.config.inventory import load_inventory
from rollout.errors import ConfigError


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


def test_each_case_rollout_reads_and_no_other_has_its_recordings() -> None:
    want = {path for case in cases(refused=False) for path in files_of(case)}
    assert set(RECORDINGS.iterdir()) == want, "record: python tests/unit/ansible_recordings.py"


@pytest.mark.parametrize("case", cases(refused=False))
def test_rollout_reads_it_as_ansible_inventory_does(
    case: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HOME", str(tmp_path))  # no ~/.ssh/config of this machine
    file = inventory_of(CASES / case)
    answer = recorded(case)
    listing = answer.listing
    hostvars: dict[str, dict[str, Any]] = listing["_meta"]["hostvars"]
    for name in ansible_groups(listing):
        hostvars.setdefault(name, {})
    parsed = read_ansible(file)
    assert parsed is not None
    merged = {host.name: {k: v.value for k, v in host.vars.items()} for host in merge(parsed)}
    assert merged == hostvars
    assert as_graph(describe(str(file))) + "\n" == answer.graph
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
