"""Nothing rollout reads from an ssh_config runs a program: `Match exec` blocks never match,
LocalCommand, PermitLocalCommand and KnownHostsCommand are dropped (each with one warning
naming the file and line), ProxyCommand is refused for the host it applies to, and
`Include` is followed as OpenSSH follows it, or refused, never skipped."""

from __future__ import annotations

import os
from pathlib import Path

import invoke
import pytest

from rollout.config.inventory import Inventory, load_inventory
from rollout.config.sshconfig import read_ssh_config
from rollout.errors import ConfigError, UserError


@pytest.fixture(autouse=True)
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A HOME of the test's own, and a paramiko that fails the test if it runs anything."""
    home = tmp_path / "home"
    (home / ".ssh").mkdir(parents=True)
    monkeypatch.setenv("HOME", str(home))

    def never(*args: object, **kwargs: object) -> None:
        raise AssertionError(f"paramiko ran {args}")

    monkeypatch.setattr(invoke, "run", never)  # how paramiko runs a Match exec
    return home


def load(tmp_path: Path, ssh_config: str, hosts: str = "[{name: a, address: gpu1}]",
         named: bool = True) -> Inventory:
    """An inventory of `hosts` with `ssh_config` as the file it names (`named`) or as
    ~/.ssh/config."""
    target = tmp_path / "ssh_config" if named else tmp_path / "home/.ssh/config"
    target.write_text(ssh_config)
    defaults = "defaults: {ssh_config: ssh_config}\n" if named else ""
    (tmp_path / "fleet.yaml").write_text(f"{defaults}hosts: {hosts}\n")
    return load_inventory(tmp_path / "fleet.yaml")


@pytest.mark.parametrize("named", [True, False])
@pytest.mark.parametrize("match", ['exec "touch {m}-%h"', '!exec "touch {m}-%h"',
                                   'host gpu1 exec "touch {m}-%h"', 'EXEC "touch {m}"',
                                   'canonical exec "touch {m}"'])
def test_match_exec_never_runs_and_its_block_never_applies(
    tmp_path: Path, capfd: pytest.CaptureFixture[str], named: bool, match: str
) -> None:
    marker = tmp_path / "ran"
    text = f"Match {match.format(m=marker)}\n    Port 2222\n    User ran\nHost *\n    User ok\n"
    host = load(tmp_path, text, named=named).hosts[0]
    assert (host.port, host.user) == (22, "ok")
    assert not list(tmp_path.glob("ran*"))
    config = tmp_path / "ssh_config" if named else tmp_path / "home/.ssh/config"
    assert f"warning: {config}:1: Match exec is not run" in capfd.readouterr().err


def test_a_match_criterion_named_exec_is_no_exec(tmp_path: Path) -> None:
    assert load(tmp_path, "Match host exec\n    Port 2222\n",
                "[{name: a, address: exec}]").hosts[0].port == 2222


def test_each_warning_is_told_once_per_process(
    tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    text = "Host gpu1\n    PermitLocalCommand yes\n    LocalCommand touch x\n" \
           "    KnownHostsCommand /bin/cat %H\n    Port 2201\n"
    assert load(tmp_path, text).hosts[0].port == 2201
    load(tmp_path, text)
    err = capfd.readouterr().err
    for number, word in ((2, "PermitLocalCommand"), (3, "LocalCommand"),
                         (4, "KnownHostsCommand")):
        line = f"warning: {tmp_path}/ssh_config:{number}: {word} is ignored"
        assert err.count(line) == 1, err
    assert "touch" not in read_ssh_config(tmp_path / "ssh_config")


def test_proxycommand_is_refused_only_for_the_host_it_applies_to(tmp_path: Path) -> None:
    text = "Host other\n    ProxyCommand nc %h %p\nHost gpu1\n    ProxyCommand none\n"
    assert load(tmp_path, text).hosts[0].address == "gpu1"
    with pytest.raises(ConfigError, match="ProxyCommand for 'other' is not supported"):
        load(tmp_path, text, "[{name: a, address: other}]")


def test_include_is_followed_from_home_ssh_with_globs(tmp_path: Path, home: Path) -> None:
    (home / ".ssh/conf.d").mkdir()
    (home / ".ssh/conf.d/1-gpu").write_text(
        'Host gpu1\n    Port 2201\nMatch exec "touch %d/ran"\n    Port 1\n')
    (home / ".ssh/conf.d/2-other").write_text("Host other\n    Port 2202\n")
    (home / ".ssh/conf.d/.hidden").write_text("Host *\n    Port 9\n")
    text = "Include conf.d/* ~/.ssh/none-such\nUser after\nHost gpu1\n    User late\n"
    one, other = load(tmp_path, text, "[{name: a, address: gpu1}, {name: b, address: other}]"
                      ).hosts  # fmt: skip
    assert (one.port, one.user) == (2201, "after")  # lines after the Include: every host
    assert (other.port, other.user) == (2202, "after")
    assert not (home / "ran").exists()


def test_an_include_inside_a_block_applies_to_that_block(tmp_path: Path, home: Path) -> None:
    (home / ".ssh/gpu.conf").write_text("Port 2201\n")
    text = f"Host gpu1\n    Include {home}/.ssh/gpu.conf\n    User u\nHost *\n    Port 22\n"
    one, other = load(tmp_path, text, "[{name: a, address: gpu1}, {name: b, address: other}]"
                      ).hosts  # fmt: skip
    assert (one.port, one.user, other.port, other.user) == (2201, "u", 22, "root")


def test_an_include_rollout_cannot_scope_is_refused_naming_the_line(
    tmp_path: Path, home: Path
) -> None:
    (home / ".ssh/hosts.conf").write_text("Host other\n    Port 2202\n")
    with pytest.raises(ConfigError) as info:
        load(tmp_path, "Host gpu1\n    Port 2201\n    Include hosts.conf\n")
    assert str(info.value.location) == f"{tmp_path}/ssh_config:3: Include"
    assert "move the Include above the first Host" in info.value.message


def test_an_included_file_that_cannot_be_read_is_an_error_naming_it(
    tmp_path: Path, home: Path
) -> None:
    os.mkfifo(home / ".ssh/fifo")
    (home / ".ssh/folder").mkdir()
    for name in ("fifo", "folder"):
        with pytest.raises(UserError) as info:
            load(tmp_path, f"Include {name}\n")
        assert str(home / ".ssh" / name) in str(info.value), info.value


def test_an_include_loop_is_bounded(tmp_path: Path, home: Path) -> None:
    (home / ".ssh/loop").write_text("Include loop\n")
    with pytest.raises(ConfigError, match="Include nested more than 16 deep"):
        load(tmp_path, "Include loop\n")
    for n in range(130):  # a file may be read many times over: the files read are counted
        (home / f".ssh/many{n}").write_text("Port 22\n")
    with pytest.raises(ConfigError, match="Include reads more than 128 files"):
        load(tmp_path, "Include many*\n")


@pytest.mark.parametrize(("text", "where", "message"), [
    ('Match exec "touch x\n', "ssh_config:1: Match", "cannot split"),
    ("Host gpu1\n    Port\n", "ssh_config:2", "not a `Keyword value` line"),
])
def test_a_line_that_does_not_parse_names_file_and_line(
    tmp_path: Path, text: str, where: str, message: str
) -> None:
    with pytest.raises(ConfigError) as info:
        load(tmp_path, text)
    assert str(info.value.location) == f"{tmp_path}/{where}" and message in info.value.message


@pytest.mark.parametrize(("text", "message"), [
    ("Host gpu1\n    HostName x;touch FILE;\n", "not a host name"),
    ("Host gpu1\n    HostName $(touch FILE)\n", "not a host name"),
    ("Host gpu1\n    HostName %h;id\n", "not a host name"),
    ("Host gpu1\n    User a;b\n", "not a user OpenSSH accepts"),
])
def test_ssh_config_values_follow_the_inventory_grammar(
    tmp_path: Path, text: str, message: str
) -> None:
    with pytest.raises(ConfigError) as info:
        load(tmp_path, text)
    assert str(info.value.location) == f"{tmp_path}/ssh_config: a", info.value
    assert "ssh_config for 'gpu1'" in info.value.message and message in info.value.message


def test_hostname_tokens_still_expand(tmp_path: Path) -> None:
    assert load(tmp_path, "Host gpu1\n    HostName %h.corp\n").hosts[0].address == "gpu1.corp"
