"""The inventory is data with a grammar: an address is a DNS host name or an IP literal, a
user is what OpenSSH accepts, a port is 1-65535, checked in one place (sshconfig.py) for
fleet.yaml, Ansible INI and YAML inventories, group_vars and ProxyJump hops alike; a value
outside it is refused at load naming the file, line and key."""

from __future__ import annotations

from pathlib import Path

import pytest

from rollout.config import inventory as inventory_module
from rollout.config.inventory import load_inventory
from rollout.config.sshconfig import Hop, check_address, check_user, parse_proxy_jump
from rollout.config.vastai import VastFleet, VastHost
from rollout.errors import ConfigError

SHELL = ["x;touch FILE;", "$(touch FILE)", "`touch FILE`", "a|b", "a&b", "a>b", "a b", "a\tb",
         "a\nb", "a'b", 'a"b', "a\\b", "a{b}", "a(b)"]
BAD_ADDRESSES = [*SHELL, "", "-oProxyCommand=x", "-h", "host:22", "[::1]", "user@host",
                 "a..b", ".a", "a/b", "a%b", "ä.example", "x" * 254, "fe80::1%$(id)",
                 "fe80::1%eth0;id", "1.2.3.4/24"]


@pytest.fixture(autouse=True)
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """No ~/.ssh/config of the machine's user leaks in."""
    (tmp_path / "home/.ssh").mkdir(parents=True)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))


@pytest.mark.parametrize("value", ["gpu1", "gpu-1.example.com", "a_b.corp", "example.com.",
                                   "xn--bcher-kva.example", "1234", "10.0.0.1", "::1",
                                   "fd00::7", "fe80::1%eth0", "localhost"])
def test_host_names_and_ip_literals_are_addresses(value: str) -> None:
    assert check_address(value) == value


@pytest.mark.parametrize("value", BAD_ADDRESSES)
def test_anything_else_is_no_address(value: str) -> None:
    with pytest.raises(ValueError, match="not a host name or an IP address|zone"):
        check_address(value)


@pytest.mark.parametrize("value", ["root", "ubuntu", "deploy-user", "john.doe", "svc$",
                                   "user@corp.example", "CORP\\alice", "_apt", "a1"])
def test_users_openssh_accepts_are_users(value: str) -> None:
    assert check_user(value) == value


@pytest.mark.parametrize("value", [*(s for s in SHELL if s != "a\\b"), "", "-l",
                                   "-oProxyCommand=x", "a\\", "a\x00b", "a\x1bb", "a -b"])
def test_users_openssh_refuses_are_refused(value: str) -> None:
    with pytest.raises(ValueError, match="not a user OpenSSH accepts"):
        check_user(value)


def test_proxy_jump_hops_use_the_same_grammar() -> None:
    assert parse_proxy_jump("svc$@gw.corp:2222,[fe80::1%eth0]") == (
        Hop("gw.corp", 2222, "svc$"), Hop("fe80::1%eth0"))
    for value in ("a;b@h", "u@$(id)", "-u@h", "h:65536", "[h]:22", "[::1]x", "u@"):
        with pytest.raises(ValueError, match=r"is not \[user@\]host\[:port\]"):
            parse_proxy_jump(value)


def load(tmp_path: Path, name: str, text: str) -> ConfigError:
    path = tmp_path / name
    path.write_text(text)
    with pytest.raises(ConfigError) as info:
        load_inventory(path)
    return info.value


def quoted(value: str) -> str:
    """`value` as a YAML double-quoted scalar."""
    escaped = value.replace("\\", "\\\\").replace('"', '\\"')
    return '"' + escaped.replace("\n", "\\n").replace("\t", "\\t") + '"'


@pytest.mark.parametrize("value", BAD_ADDRESSES)
def test_a_bad_fleet_yaml_address_names_file_line_and_key(tmp_path: Path, value: str) -> None:
    error = load(tmp_path, "fleet.yaml", "hosts:\n  - name: a\n    address: 10.0.0.1\n"
                 f"  - name: b\n    address: {quoted(value)}\n")
    assert error.location is not None
    assert str(error.location) == f"{tmp_path}/fleet.yaml:5: hosts[1].address", error
    assert "host name or an IP address" in error.message or "zone" in error.message


@pytest.mark.parametrize(("text", "where"), [
    ("defaults: {user: 'a;b'}\nhosts: [{name: a, address: h}]\n", "1: defaults.user"),
    ("hosts:\n  - {name: a, address: h, user: '$(id)'}\n", "2: hosts[0].user"),
    ("hosts:\n  - {name: a, address: h, user: '-oProxyCommand=x'}\n", "2: hosts[0].user"),
])
def test_a_bad_fleet_yaml_user_names_file_line_and_key(
    tmp_path: Path, text: str, where: str
) -> None:
    error = load(tmp_path, "fleet.yaml", text)
    assert str(error.location) == f"{tmp_path}/fleet.yaml:{where}", error
    assert "not a user OpenSSH accepts" in error.message


@pytest.mark.parametrize("port", ["0", "65536", "true", "'22;id'"])
def test_a_bad_fleet_yaml_port_names_file_line_and_key(tmp_path: Path, port: str) -> None:
    error = load(tmp_path, "fleet.yaml", f"hosts:\n  - {{name: a, address: h, port: {port}}}\n")
    assert str(error.location) == f"{tmp_path}/fleet.yaml:2: hosts[0].port", error


@pytest.mark.parametrize(("line", "key", "message"), [
    ("h1 ansible_host='x;touch FILE;'", "h1: ansible_host", "not a host name"),
    ("h1 ansible_host='$(touch FILE)'", "h1: ansible_host", "not a host name"),
    ("h1 ansible_ssh_host=-oProxyCommand=x", "h1: ansible_ssh_host", "not a host name"),
    ("-h1", "-h1", "not a host name"),
    ("h1 ansible_user='a;b'", "h1: ansible_user", "not a user OpenSSH accepts"),
    ("h1 ansible_port=0", "h1: ansible_port", "greater than or equal to 1"),
    ("h1:70000", "h1: ansible_port", "less than or equal to 65535"),
])
def test_a_bad_ini_address_user_or_port_names_file_line_and_var(
    tmp_path: Path, line: str, key: str, message: str
) -> None:
    error = load(tmp_path, "hosts.ini", f"[gpus]\nok ansible_host=10.0.0.1\n{line}\n")
    assert str(error.location) == f"{tmp_path}/hosts.ini:3: {key}", error
    assert message in error.message


def test_a_bad_yaml_inventory_address_names_file_line_and_var(tmp_path: Path) -> None:
    error = load(tmp_path, "hosts.yml", "all:\n  hosts:\n    ok:\n    h1:\n"
                 "      ansible_host: 'x;touch FILE;'\n")
    assert str(error.location) == f"{tmp_path}/hosts.yml:5: h1: ansible_host", error


def test_a_bad_user_in_group_vars_names_that_file(tmp_path: Path) -> None:
    (tmp_path / "group_vars").mkdir()
    (tmp_path / "group_vars/all.yml").write_text("tier: a\nansible_user: '$(id)'\n")
    error = load(tmp_path, "hosts.ini", "[gpus]\nh1\n")
    assert str(error.location) == f"{tmp_path}/group_vars/all.yml:2: h1: ansible_user", error


def test_good_addresses_load_from_every_format(tmp_path: Path) -> None:
    (tmp_path / "fleet.yaml").write_text(
        "hosts:\n  - {name: a, address: 'fd00::7', user: 'svc$'}\n"
        "  - {name: b, address: gpu-1.example.com.}\n")
    (tmp_path / "hosts.ini").write_text("[g]\nh1 ansible_host=fe80::1%eth0 ansible_user=u\n")
    assert [h.address for h in load_inventory(tmp_path / "fleet.yaml").hosts] == [
        "fd00::7", "gpu-1.example.com."]
    assert load_inventory(tmp_path / "hosts.ini").hosts[0].address == "fe80::1%eth0"


def test_a_vast_instance_outside_the_grammar_is_refused_alone(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fleet = VastFleet([VastHost("bad", "fe80::1%$(id)", 22, (), {}),
                       VastHost("good", "10.0.0.9", 2222, (), {})], [])
    monkeypatch.setattr(inventory_module, "load_vast_fleet", lambda source, where: fleet)
    inv = inventory_module._from_vastai("vastai:gpu")
    assert [h.name for h in inv.hosts] == ["good"]
    assert list(inv.refused) == ["bad"] and not inv.skipped
