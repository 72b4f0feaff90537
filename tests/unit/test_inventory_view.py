"""`rollout inventory`: what rollout made of an inventory, --list (JSON in ansible-inventory's
shape, every value with the file and line it came from) and --graph; hostile names and
values are escaped, never printed raw."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

import rollout.cli
from rollout.commands.inventory_view import as_graph, as_json, describe

CASES = Path(__file__).parent / "inventories"


def run_rollout(*argv: str) -> int:
    try:
        rollout.cli.program.run(["rollout", *argv])
    except SystemExit as e:
        return int(e.code or 0)
    return 0


@pytest.fixture(autouse=True)
def no_home_config(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HOME", str(tmp_path))


def listed(capsys: pytest.CaptureFixture[str], *argv: str) -> dict[str, Any]:
    assert run_rollout("inventory", *argv) == 0
    return dict(json.loads(capsys.readouterr().out))


def test_list_names_each_values_file_and_line(capsys: pytest.CaptureFixture[str]) -> None:
    case = CASES / "vars-folders-ini"
    out = listed(capsys, "--hosts", str(case / "hosts"), "--list")
    assert out["web"] == {"hosts": ["web-1", "web-2"]}
    assert out["prod"] == {"children": ["web", "db"]}
    web1 = out["_meta"]["hostvars"]["web-1"]
    assert (web1["address"], web1["port"], web1["user"]) == ("10.0.0.1", 2201, "deploy")
    assert web1["vars"]["level"] == "web-file" and web1["vars"]["own"] == "host-file"
    sources = web1["sources"]
    assert sources["address"] == f"{case / 'hosts'}:2: ansible_host"
    assert sources["port"] == f"{case / 'host_vars/web-1.yaml'}:2: ansible_port"
    assert sources["user"] == f"{case / 'group_vars/all.yml'}:3: ansible_user"
    assert sources["vars.order"] == f"{case / 'group_vars/prod/20-more'}:1"
    assert sources["key_file"].startswith("not set")
    db1 = out["_meta"]["hostvars"]["db-1"]
    assert db1["address"] == "10.0.1.2"  # host_vars/db-1/b.yml after a.yml
    assert db1["sources"]["address"] == f"{case / 'host_vars/db-1/b.yml'}:1: ansible_host"


def test_list_shows_proxy_jump_and_its_source(capsys: pytest.CaptureFixture[str]) -> None:
    case = CASES / "proxy-jump-ini" / "hosts"
    hosts = listed(capsys, "--hosts", str(case))["_meta"]["hostvars"]
    assert hosts["h1"]["proxy_jump"] == ["jump@bastion.example.com:2200"]
    assert hosts["h1"]["sources"]["proxy_jump"] == f"{case}:2: ansible_ssh_common_args"
    assert hosts["h2"]["proxy_jump"] == ["root@bastion.example.com:22"]
    assert hosts["h3"]["proxy_jump"] == ["root@bastion:22"]
    assert hosts["h4"]["proxy_jump"] is None
    assert "ansible_ssh_common_args" not in hosts["h1"]["vars"]


def test_graph_is_ansible_inventorys_tree(capsys: pytest.CaptureFixture[str]) -> None:
    assert run_rollout("inventory", "--hosts", str(CASES / "vars-folders-ini/hosts"),
                       "--graph") == 0  # fmt: skip
    assert capsys.readouterr().out == (
        "@all:\n  |--@ungrouped:\n  |--@prod:\n  |  |--@web:\n  |  |  |--web-1\n"
        "  |  |  |--web-2\n  |  |--@db:\n  |  |  |--db-1\n"
    )


def test_fleet_yaml_sources(tmp_path: Path) -> None:
    fleet = tmp_path / "fleet.yaml"
    fleet.write_text("defaults:\n  user: ops\n  vars: {region: eu}\nhosts:\n"
                     "  - name: a\n    address: 10.0.0.9\n    groups: [gpu]\n"
                     "    vars: {tier: big}\n  - name: b\n    address: 10.0.0.8\n")  # fmt: skip
    view = describe(str(fleet))
    a = view.hosts["a"]
    assert (a["address"], a["user"]) == ("10.0.0.9", "ops")
    assert a["vars"] == {"region": "eu", "tier": "big"}
    assert a["sources"]["address"] == f"{fleet}:6: hosts[0].address"
    assert a["sources"]["user"] == f"{fleet}:2: defaults.user"
    assert a["sources"]["vars.region"] == f"{fleet}:3: defaults.vars.region"
    assert a["sources"]["vars.tier"] == f"{fleet}:8: hosts[0].vars.tier"
    assert as_graph(view) == "@all:\n  |--@ungrouped:\n  |  |--b\n  |--@gpu:\n  |  |--a"


def test_hostile_names_and_values_are_escaped(tmp_path: Path) -> None:
    inv = tmp_path / "hosts"
    inv.write_text("[g]\nh1 ansible_host=127.0.0.1\n[g:vars]\nbell=\x07ring\x1b[31mred\r\n"
                   "[empty\x1bx\x07]\n")  # fmt: skip
    view = describe(str(inv))
    text = as_json(view)
    assert "\x1b" not in text and "\x07" not in text and "\\u001b[31mred" in text
    assert json.loads(text)["_meta"]["hostvars"]["h1"]["vars"]["bell"] == "\x07ring\x1b[31mred"
    graph = as_graph(view)
    assert "\x1b" not in graph and "@empty\\x1bx\\x07:" in graph


def test_notes_point_out_kept_comments_and_ignored_vars(tmp_path: Path) -> None:
    inv = tmp_path / "hosts"
    inv.write_text("h1 ansible_python_interpreter=/usr/bin/python3.9\n[all:vars]\n"
                   "region=eu # the region\n")  # fmt: skip
    notes = describe(str(inv)).notes
    assert any("ansible_python_interpreter" in n and "ignored" in n for n in notes)
    assert any(f"{inv}:3: region" in n and "'eu # the region'" in n for n in notes)


def test_graph_and_list_together_is_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    code = run_rollout("inventory", "--hosts", str(CASES / "doc-basic-ini/hosts"), "--graph",
                       "--list")  # fmt: skip
    assert code == 2 and "not both" in capsys.readouterr().err


def test_a_refused_inventory_is_exit_2_naming_the_line(
    capsys: pytest.CaptureFixture[str],
) -> None:
    case = CASES / "refused-range-ini" / "hosts"
    assert run_rollout("inventory", "--hosts", str(case)) == 2
    assert f"{case}:2: www[01:50].example.com" in capsys.readouterr().err
