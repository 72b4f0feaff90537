from __future__ import annotations

from pathlib import Path

import pytest

from rollout.config.inventory import load_inventory
from rollout.errors import ConfigError, UserError

FLEET = """\
defaults:
  user: root
  port: 22
  key_file: keys/id_ed25519
  known_hosts: known_hosts
  host_key_policy: strict
  connect_timeout: 10
  vars: {memory_limit: 256m, tier: lab}
hosts:
  - name: lab-1
    address: 127.0.0.1
    port: 22001
    groups: [lab, canary]
    vars: {memory_limit: 512m}
  - name: lab-2
    address: 127.0.0.1
    port: 22002
    user: admin
    key_file: ~/other_key
    host_key_policy: accept-new
    groups: [lab]
  - name: gpu-a
    address: 10.0.0.5
"""


def write(tmp_path: Path, text: str, name: str = "fleet.yaml") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def error_of(tmp_path: Path, text: str) -> ConfigError:
    with pytest.raises(ConfigError) as info:
        load_inventory(write(tmp_path, text))
    return info.value


def test_hosts_are_resolved(tmp_path: Path) -> None:
    inv = load_inventory(write(tmp_path, FLEET))
    one, two, three = inv.hosts
    assert (one.name, one.address, one.port, one.user) == ("lab-1", "127.0.0.1", 22001, "root")
    assert one.key_file == tmp_path / "keys/id_ed25519"
    assert one.known_hosts == tmp_path / "known_hosts"
    assert one.host_key_policy == "strict"
    assert one.connect_timeout == 10
    assert one.groups == ("lab", "canary")
    assert one.vars == {"memory_limit": "512m", "tier": "lab"}
    assert two.user == "admin" and two.host_key_policy == "accept-new"
    assert two.key_file == Path("~/other_key").expanduser()
    assert three.port == 22 and three.groups == ()
    assert three.vars == {"memory_limit": "256m", "tier": "lab"}


def test_defaults_default(tmp_path: Path) -> None:
    inv = load_inventory(write(tmp_path, "hosts: [{name: a, address: h}]\n"))
    (host,) = inv.hosts
    assert host.key_file is None
    assert host.known_hosts == Path("~/.ssh/known_hosts").expanduser()
    assert (host.port, host.user, host.host_key_policy) == (22, "root", "strict")


def test_hosts_are_hashable(tmp_path: Path) -> None:
    inv = load_inventory(write(tmp_path, FLEET))
    assert len({h: h.name for h in inv.hosts}) == 3


@pytest.mark.parametrize(
    ("limit", "names"),
    [
        (None, ["lab-1", "lab-2", "gpu-a"]),
        ("", ["lab-1", "lab-2", "gpu-a"]),
        ("all", ["lab-1", "lab-2", "gpu-a"]),
        ("lab-2", ["lab-2"]),
        ("canary", ["lab-1"]),
        ("gpu-a, canary", ["lab-1", "gpu-a"]),
        ("lab-*", ["lab-1", "lab-2"]),
        ("lab", ["lab-1", "lab-2"]),
        ("can*", ["lab-1"]),
    ],
)
def test_select(tmp_path: Path, limit: str | None, names: list[str]) -> None:
    inv = load_inventory(write(tmp_path, FLEET))
    assert [h.name for h in inv.select(limit)] == names


def test_select_unknown_name(tmp_path: Path) -> None:
    inv = load_inventory(write(tmp_path, FLEET))
    with pytest.raises(UserError, match="'nope'"):
        inv.select("lab-1,nope")


def test_groups(tmp_path: Path) -> None:
    inv = load_inventory(write(tmp_path, FLEET))
    assert [h.name for h in inv.groups["lab"]] == ["lab-1", "lab-2"]


def test_wrong_type_names_line_and_key(tmp_path: Path) -> None:
    err = error_of(tmp_path, FLEET.replace("port: 22002", "port: twenty"))
    assert err.location is not None
    assert (err.location.line, err.location.key) == (17, "hosts[1].port")
    assert "valid integer" in err.message
    assert str(err).startswith(f"{tmp_path / 'fleet.yaml'}:17: hosts[1].port: ")


def test_unknown_key(tmp_path: Path) -> None:
    err = error_of(tmp_path, FLEET.replace("    user: admin", "    usr: admin"))
    assert err.location is not None
    assert (err.location.line, err.location.key) == (18, "hosts[1].usr")
    assert "unknown key" in err.message and "did you mean 'user'" in err.message


def test_unknown_key_in_defaults(tmp_path: Path) -> None:
    err = error_of(tmp_path, FLEET.replace("  port: 22\n", "  prot: 22\n"))
    assert err.location is not None
    assert (err.location.line, err.location.key) == (3, "defaults.prot")


def test_missing_key_points_at_the_host(tmp_path: Path) -> None:
    err = error_of(tmp_path, FLEET.replace("    address: 10.0.0.5\n", ""))
    assert err.location is not None
    assert (err.location.line, err.location.key) == (22, "hosts[2].address")
    assert "missing" in err.message


def test_bad_host_key_policy(tmp_path: Path) -> None:
    err = error_of(tmp_path, FLEET.replace("accept-new", "yes-please"))
    assert err.location is not None
    assert (err.location.line, err.location.key) == (20, "hosts[1].host_key_policy")
    assert "'strict' or 'accept-new'" in err.message


def test_duplicate_host(tmp_path: Path) -> None:
    err = error_of(tmp_path, FLEET.replace("name: gpu-a", "name: lab-1"))
    assert err.location is not None
    assert (err.location.line, err.location.key) == (22, "hosts[2].name")
    assert "duplicate host name 'lab-1'" in err.message and "line 10" in err.message


def test_bad_host_name(tmp_path: Path) -> None:
    err = error_of(tmp_path, FLEET.replace("name: gpu-a", "name: gpu a"))
    assert err.location is not None and err.location.key == "hosts[2].name"


def test_several_errors_are_all_reported(tmp_path: Path) -> None:
    text = FLEET.replace("port: 22001", "port: x").replace("port: 22002", "port: 0")
    err = error_of(tmp_path, text)
    assert err.location is not None and err.location.line == 12
    assert "fleet.yaml:17: hosts[1].port" in err.message


def test_bad_yaml(tmp_path: Path) -> None:
    err = error_of(tmp_path, "hosts:\n  - name: a\n    address: [x\n")
    assert err.location is not None and err.location.line is not None
    assert "invalid YAML" in err.message


def test_duplicate_yaml_key(tmp_path: Path) -> None:
    err = error_of(tmp_path, "hosts: []\nhosts: []\n")
    assert err.location is not None and err.location.line == 2


def test_missing_file(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="inventory file not found") as info:
        load_inventory(tmp_path / "nope.yaml")
    assert info.value.exit_code == 2


def test_empty_file(tmp_path: Path) -> None:
    err = error_of(tmp_path, "# nothing\n")
    assert err.location is not None and err.location.key == "hosts"
