"""Ansible inventories (INI and YAML) as --hosts: connection vars, groups and children,
Ansible's var precedence, values kept as data, and errors that name file, line and key."""

from __future__ import annotations

from pathlib import Path

import pytest

from rollout.config.inventory import Host, load_inventory
from rollout.errors import ConfigError

INI = """\
# a fleet as an Ansible user writes it
; both comment styles
loner ansible_host=127.0.0.1 ansible_port=2299

[gpu]
gpu-1 ansible_host=127.0.0.1 ansible_port=40612 cuda="12.4" tier=host
gpu-2:17008 ansible_user=ubuntu   # a comment
[cpu]
cpu-1 ansible_host=127.0.0.2

[gpu:vars]
tier=gpu
memory_limit=512m
ansible_ssh_private_key_file=keys/fleet

[prod:children]
gpu
cpu

[prod:vars]
tier=prod
region=eu

[all:vars]
ansible_user=root
rollout_known_hosts=known_hosts
rollout_host_key_policy=accept-new
region=any
"""

YAML = """\
all:
  hosts:
    loner: {ansible_host: 127.0.0.1, ansible_port: 2299}
  vars:
    ansible_user: root
    rollout_known_hosts: known_hosts
    rollout_host_key_policy: accept-new
    region: any
  children:
    prod:
      vars: {tier: prod, region: eu}
      children:
        gpu:
          hosts:
            gpu-1: {ansible_host: 127.0.0.1, ansible_port: 40612, cuda: 12.4, tier: host}
            gpu-2: {ansible_port: 17008, ansible_user: ubuntu}
          vars:
            tier: gpu
            memory_limit: 512m
            ansible_ssh_private_key_file: keys/fleet
        cpu:
          hosts:
            cpu-1: {ansible_host: 127.0.0.2}
"""


def write(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def by_name(hosts: list[Host]) -> dict[str, Host]:
    return {h.name: h for h in hosts}


@pytest.mark.parametrize(("name", "text"), [("inventory.ini", INI), ("hosts", INI),
                                            ("inventory.yaml", YAML)])  # fmt: skip
def test_connection_vars_groups_and_precedence(
    tmp_path: Path, name: str, text: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)  # a relative key path is read from here, as Ansible reads it
    inventory = load_inventory(write(tmp_path, name, text))
    hosts = by_name(inventory.hosts)
    assert list(hosts) == ["loner", "gpu-1", "gpu-2", "cpu-1"]
    gpu1, gpu2, cpu1, loner = hosts["gpu-1"], hosts["gpu-2"], hosts["cpu-1"], hosts["loner"]
    assert (gpu1.address, gpu1.port, gpu1.user) == ("127.0.0.1", 40612, "root")
    assert (gpu2.address, gpu2.port, gpu2.user) == ("gpu-2", 17008, "ubuntu")
    assert (loner.port, loner.groups, cpu1.port) == (2299, (), 22)
    assert gpu1.key_file == tmp_path / "keys/fleet" and cpu1.key_file is None
    assert gpu1.known_hosts == tmp_path / "known_hosts"
    assert gpu1.host_key_policy == "accept-new" and gpu1.connect_timeout == 10
    assert set(gpu1.groups) == {"gpu", "prod"} and set(cpu1.groups) == {"cpu", "prod"}
    # all < prod (parent) < gpu (child) < the host's own vars
    assert gpu1.vars == {"region": "eu", "tier": "host", "memory_limit": "512m", "cuda": 12.4}
    assert gpu2.vars["tier"] == "gpu" and cpu1.vars == {"region": "eu", "tier": "prod"}
    assert loner.vars == {"region": "any"}
    assert [h.name for h in inventory.select("prod")] == ["gpu-1", "gpu-2", "cpu-1"]


def test_ini_and_yaml_give_the_same_fleet(tmp_path: Path) -> None:
    ini = load_inventory(write(tmp_path, "a.ini", INI)).hosts
    yaml = load_inventory(write(tmp_path, "a.yml", YAML)).hosts
    assert [(h, dict(h.vars), sorted(h.groups)) for h in ini] == [
        (h, dict(h.vars), sorted(h.groups)) for h in yaml
    ]


def test_sibling_groups_merge_by_name_and_a_host_in_two_groups_is_one_host(
    tmp_path: Path,
) -> None:
    text = "[b]\nh1 own=1\n[a]\nh1 other=2\n[a:vars]\nx=a\n[b:vars]\nx=b\n"
    (host,) = load_inventory(write(tmp_path, "inv.ini", text)).hosts
    assert host.vars == {"x": "b", "own": 1, "other": 2} and set(host.groups) == {"a", "b"}


HOSTILE = [
    "$(touch /tmp/pwned)",
    "`id`",
    "__import__('os').system('id')",
    "{{ lookup('pipe', 'id') }}",
    "'; rm -rf / #",
]


def test_hostile_values_stay_data(tmp_path: Path) -> None:
    lines = [f"h1 ansible_host=127.0.0.1 v{i}={value!r}" for i, value in enumerate(HOSTILE)]
    ini = "\n".join(["[g]", "h1 ansible_host=127.0.0.1"]) + "\n[g:vars]\n"
    ini += "".join(f"v{i}={value}\n" for i, value in enumerate(HOSTILE))
    for text in ("[g]\n" + "\n".join(lines) + "\n", ini):
        (host,) = load_inventory(write(tmp_path, "inv.ini", text)).hosts
        assert [host.vars[f"v{i}"] for i in range(len(HOSTILE))] == HOSTILE
    assert not Path("/tmp/pwned").exists()


@pytest.mark.parametrize(
    ("text", "where", "message"),
    [
        ("h1 ansible_port=abc\n", "inv.ini:1: h1: ansible_port", "valid integer"),
        ("\n[g]\nh1 ansible_port=70000\n", "inv.ini:3: h1: ansible_port", "less than or equal"),
        ("[g:vars]\nx=1\n", "inv.ini:1: g", "[g:vars] names a group that is defined nowhere"),
        ("[p:children]\nq\n", "inv.ini:2: q", "includes a group that is defined nowhere"),
        ("[g]\nweb[01:10]\n", "inv.ini:2: web[01:10]", "host ranges"),
        ("[g]\nh1 novalue\n", "inv.ini:2: h1", "expected key=value after host 'h1'"),
        ("[g:weird]\n", "inv.ini:1: g", "unknown section kind :weird"),
        ("[g\n", "inv.ini:1", "not a section header"),
        ("h1 ansible_connection=local\n", "inv.ini:1: ansible_connection", "not supported"),
        ('h1 ansible_host="x\n', "inv.ini:1", "No closing quotation"),
        ("bad/name\n", "inv.ini:1: bad/name", "should match pattern"),
        ("h1:port\n", "inv.ini:1: h1", "port 'port' of host 'h1' is not a number"),
        ("[g]\nh1 rollout_host_key_policy=yolo\n", "inv.ini:2: h1: rollout_host_key_policy",
         "strict"),
        ("[a:children]\nb\n[b:children]\na\n", "inv.ini:1: a", "a -> b -> a"),
        ("# nothing\n", "inv.ini", "the inventory has no hosts"),
    ],
)
def test_ini_errors_name_file_line_key(tmp_path: Path, text: str, where: str,
                                       message: str) -> None:  # fmt: skip
    with pytest.raises(ConfigError) as caught:
        load_inventory(write(tmp_path, "inv.ini", text))
    assert str(caught.value).startswith(f"{tmp_path}/{where}"), caught.value
    assert caught.value.exit_code == 2 and message in str(caught.value)


@pytest.mark.parametrize(
    ("text", "where", "message"),
    [
        ("all:\n  hostz:\n    h1:\n", "inv.yaml:2: all.hostz", "unknown group key"),
        ("plugin: aws_ec2\n", "inv.yaml:1: plugin", "inventory plugins are not supported"),
        ("all:\n  hosts:\n    h1:\n      s: !vault |\n        $ANSIBLE_VAULT;1.1\n",
         "inv.yaml:4: all.hosts.h1.s", "tagged values (!vault)"),
        ("all:\n  hosts:\n    h1:\n      ansible_port: 0\n", "inv.yaml:4: h1: ansible_port",
         "greater than or equal to 1"),
        ("all:\n  hosts: [h1]\n", "inv.yaml:2: all.hosts", "expected a mapping"),
        ("all:\n  hosts:\n    web[1:3]:\n", "inv.yaml:3: all.hosts.web[1:3]", "host ranges"),
    ],
)
def test_yaml_errors_name_file_line_key(tmp_path: Path, text: str, where: str,
                                        message: str) -> None:  # fmt: skip
    with pytest.raises(ConfigError) as caught:
        load_inventory(write(tmp_path, "inv.yaml", text))
    assert str(caught.value).startswith(f"{tmp_path}/{where}"), caught.value
    assert message in str(caught.value)


def test_fleet_yaml_is_still_fleet_yaml(tmp_path: Path) -> None:
    text = "hosts:\n  - name: a\n    address: 127.0.0.1\n    groups: [all-of-them]\n"
    (host,) = load_inventory(write(tmp_path, "fleet.yaml", text)).hosts
    assert host.groups == ("all-of-them",) and host.port == 22
