"""How a host's SSH settings are put together: the inventory, ~/.ssh/config, ProxyJump, and
the keys the transport offers (the agent and default keys when the inventory names none)."""

from __future__ import annotations

from pathlib import Path

import paramiko
import pytest
from fabric import Connection

from rollout.config.inventory import Host, Inventory, load_inventory
from rollout.config.sshconfig import Hop, JumpHost, parse_proxy_jump
from rollout.errors import ConfigError
from rollout.transport.ssh import SshTransport, _Refuse

SSH_CONFIG = """\
Host gpu1
    HostName 10.1.0.7
    Port 2201
    User prover
    IdentityFile ~/.ssh/id_gpu
    ProxyJump bastion

Host bastion
    HostName 203.0.113.9
    Port 2222
    User jumper

Host *.corp
    User corp
"""


@pytest.fixture(autouse=True)
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A HOME of the test's own: no ~/.ssh/config of the machine's user leaks in."""
    home = tmp_path / "home"
    (home / ".ssh").mkdir(parents=True)
    monkeypatch.setenv("HOME", str(home))
    return home


def load(tmp_path: Path, text: str, ssh_config: str | None = SSH_CONFIG) -> Inventory:
    if ssh_config is not None:
        (tmp_path / "ssh_config").write_text(ssh_config)
    path = tmp_path / "fleet.yaml"
    path.write_text(text)
    return load_inventory(path)


def test_an_alias_takes_every_setting_from_ssh_config(tmp_path: Path, home: Path) -> None:
    inv = load(tmp_path, "defaults: {ssh_config: ssh_config}\n"
                         "hosts: [{name: a, address: gpu1}]\n")
    host = inv.hosts[0]
    assert (host.address, host.port, host.user) == ("10.1.0.7", 2201, "prover")
    assert host.key_file == home / ".ssh/id_gpu"
    assert host.proxy_jump == (JumpHost("203.0.113.9", 2222, "jumper"),)


def test_what_the_inventory_writes_wins_over_ssh_config(tmp_path: Path) -> None:
    inv = load(tmp_path, """\
defaults: {ssh_config: ssh_config, user: ops}
hosts:
  - {name: a, address: gpu1, port: 22, key_file: k, proxy_jump: none}
  - {name: b, address: gpu1, user: me, proxy_jump: "j@10.0.0.1:2022"}
  - {name: c, address: x.corp}
""")
    a, b, c = inv.hosts
    assert (a.address, a.port, a.user, a.key_file, a.proxy_jump) == (
        "10.1.0.7", 22, "ops", tmp_path / "k", ())
    assert (b.port, b.user) == (2201, "me")
    assert b.proxy_jump == (JumpHost("10.0.0.1", 2022, "j"),)
    assert (c.address, c.port, c.user) == ("x.corp", 22, "ops")  # written defaults win


def test_ssh_config_fills_what_defaults_leave_unwritten(tmp_path: Path) -> None:
    inv = load(tmp_path, "defaults: {ssh_config: ssh_config}\n"
                         "hosts: [{name: c, address: x.corp}, {name: d, address: 10.0.0.3}]\n")
    c, d = inv.hosts
    assert (c.user, c.port, c.key_file, c.proxy_jump) == ("corp", 22, None, ())
    assert (d.user, d.port) == ("root", 22)  # rollout's defaults where ssh_config is silent


def test_a_hop_without_user_takes_the_hosts_user(tmp_path: Path) -> None:
    inv = load(tmp_path, "defaults: {ssh_config: ssh_config, proxy_jump: 'gw,bastion:22'}\n"
                         "hosts: [{name: a, address: 10.0.0.3, user: deploy}]\n")
    assert inv.hosts[0].proxy_jump == (JumpHost("gw", 22, "deploy"),
                                       JumpHost("203.0.113.9", 22, "jumper"))


def test_the_default_ssh_config_is_home_s_and_serves_ansible_inventories(
    tmp_path: Path, home: Path
) -> None:
    (home / ".ssh/config").write_text(SSH_CONFIG)
    ini = tmp_path / "hosts.ini"
    ini.write_text("[gpus]\ngpu1\n")
    host = load_inventory(ini).hosts[0]
    assert (host.name, host.address, host.port, host.user) == ("gpu1", "10.1.0.7", 2201, "prover")


def test_ssh_config_null_reads_none(tmp_path: Path, home: Path) -> None:
    (home / ".ssh/config").write_text(SSH_CONFIG)
    inv = load(tmp_path, "defaults: {ssh_config: null}\nhosts: [{name: a, address: gpu1}]\n")
    assert (inv.hosts[0].address, inv.hosts[0].port) == ("gpu1", 22)


def test_a_missing_default_ssh_config_is_no_error(tmp_path: Path) -> None:
    inv = load(tmp_path, "hosts: [{name: a, address: gpu1}]\n", ssh_config=None)
    assert inv.hosts[0].address == "gpu1"


def test_an_ssh_config_the_inventory_names_must_exist(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as info:
        load(tmp_path, "defaults: {ssh_config: nope}\nhosts: [{name: a, address: h}]\n", None)
    assert "fleet.yaml:1: defaults.ssh_config" in str(info.value)
    assert "nope is not a file" in str(info.value)


def test_proxycommand_is_refused_not_dropped(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="ProxyCommand"):
        load(tmp_path, "defaults: {ssh_config: ssh_config}\nhosts: [{name: a, address: p}]\n",
             "Host p\n    ProxyCommand nc %h %p\n")


def test_an_unparsable_ssh_config_is_a_config_error(tmp_path: Path) -> None:
    for text in ("Host p\n    Port\n", "Host p\n    Port 0x16\n"):
        with pytest.raises(ConfigError, match="ssh_config|Port"):
            load(tmp_path, "defaults: {ssh_config: ssh_config}\n"
                           "hosts: [{name: a, address: p}]\n", text)


@pytest.mark.parametrize("value", [
    "-oProxyCommand=touch /tmp/pwned", "h;id", "$(id)", "`id`", "a b", "ssh://h", "h:0",
    "h:70000", "u@@h", "h,", ",h", "h:22:22", "-J", "h\nProxyCommand x", "[evil host]",
])
def test_hostile_proxy_jump_values_are_config_errors(tmp_path: Path, value: str) -> None:
    text = 'hosts:\n  - name: a\n    address: h\n    proxy_jump: "{}"\n'.format(
        value.replace("\n", "\\n"))
    with pytest.raises(ConfigError) as info:
        load(tmp_path, text, None)
    assert "fleet.yaml:4" in str(info.value) and "proxy_jump" in str(info.value)


def test_hostile_proxyjump_in_ssh_config_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="not"):
        load(tmp_path, "defaults: {ssh_config: ssh_config}\nhosts: [{name: a, address: p}]\n",
             "Host p\n    ProxyJump -oProxyCommand=id\n")


def test_proxy_jump_words() -> None:
    assert parse_proxy_jump("none") == ()
    assert parse_proxy_jump("u@h:2,[fd00::1]:22,g") == (
        Hop("h", 2, "u"), Hop("fd00::1", 22), Hop("g"))


def host(key_file: Path | None, jumps: tuple[JumpHost, ...] = ()) -> Host:
    return Host("a", "10.0.0.9", 22, "root", key_file, Path("/nonexistent/known_hosts"),
                "strict", 5, proxy_jump=jumps)


def test_no_key_file_offers_the_agent_and_default_keys() -> None:
    conn = SshTransport(host(None))._checked(host(None), False)
    assert conn.connect_kwargs["allow_agent"] is True
    assert conn.connect_kwargs["look_for_keys"] is True
    assert "key_filename" not in conn.connect_kwargs


def test_a_key_file_is_the_only_key_offered(tmp_path: Path) -> None:
    key = paramiko.ECDSAKey.generate()
    key.write_private_key_file(str(tmp_path / "id"))
    target = host(tmp_path / "id")
    conn = SshTransport(target)._checked(target, False)  # read by rollout, given as a key
    assert conn.connect_kwargs["pkey"].get_base64() == key.get_base64()
    assert "key_filename" not in conn.connect_kwargs
    assert conn.connect_kwargs["allow_agent"] is False
    assert conn.connect_kwargs["look_for_keys"] is False


def test_jump_hosts_are_chained_and_checked_like_the_host(home: Path) -> None:
    # fabric must not read ~/.ssh/config again: it was read with the inventory
    (home / ".ssh/config").write_text("Host *\n    HostName evil\n    ProxyCommand nc x 1\n")
    jumps = (JumpHost("j1", 2022, "a"), JumpHost("j2", 22, "b"))
    target = host(None, jumps)
    conn = SshTransport(target)._unopened()
    assert (conn.host, conn.port, conn.user) == ("10.0.0.9", 22, "root")
    second = conn.gateway
    assert isinstance(second, Connection) and (second.host, second.user) == ("j2", "b")
    first = second.gateway
    assert isinstance(first, Connection) and (first.host, first.port) == ("j1", 2022)
    assert first.gateway is False
    for each in (conn, second, first):
        assert isinstance(each.client._policy, _Refuse)
        assert each.connect_kwargs["allow_agent"] is True
