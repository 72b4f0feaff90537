"""Everything checkable at load is checked at load: exit 2 naming file, line and key."""

from __future__ import annotations

from pathlib import Path

import pytest

from rollout.commands.app import RolloutRequest
from rollout.commands.rollback import run_fleet_rollback
from rollout.config.inventory import load_inventory
from rollout.errors import ConfigError, HostKeyError, Location, StepFailed, UserError
from rollout.host.layout import Layout, is_release_id
from rollout.steps.kinds import load_playbook
from rollout.transport.ssh import SshTransport

PLAYBOOK = """\
name: test
release: {executables: [cuzk-daemon]}
build:
  dockerfile: Dockerfile
  context: .
  image_paths: {cuzk-daemon: /bin/d}
daemon:
  stop_grace: 10
validate:
  input: {path: /data/c1.json}
steps:
  - {name: build, kind: build}
  - {name: validate, kind: validate, timeout: 60, params: {timeout: 30}}
"""

FLEET = """\
defaults:
  known_hosts: known_hosts
hosts:
  - {name: lab-1, address: 127.0.0.1, port: 22001}
"""


def playbook_error(tmp_path: Path, old: str, new: str) -> tuple[int | None, str | None, str]:
    (tmp_path / "Dockerfile").touch()
    path = tmp_path / "play.yaml"
    path.write_text(PLAYBOOK.replace(old, new))
    with pytest.raises(ConfigError) as info:
        load_playbook(path)
    where = info.value.location
    assert isinstance(where, Location) and where.file == str(path)
    return where.line, where.key, info.value.message


def inventory_error(tmp_path: Path, text: str) -> tuple[int | None, str | None, str]:
    path = tmp_path / "fleet.yaml"
    path.write_text(text)
    with pytest.raises(ConfigError) as info:
        load_inventory(path)
    where = info.value.location
    assert isinstance(where, Location) and where.file == str(path)
    return where.line, where.key, info.value.message


@pytest.mark.parametrize(
    ("old", "new", "line", "key"),
    [
        ("  stop_grace: 10", "  config_template: nope.j2", 8, "daemon.config_template"),
        ("path: /data/c1.json}", "path: /data/c1.json, source: c1.json}", 10,
         "validate.input.source"),
        ("dockerfile: Dockerfile", "dockerfile: Missing", 4, "build.dockerfile"),
    ],
)
def test_files_the_playbook_names_exist(
    tmp_path: Path, old: str, new: str, line: int, key: str
) -> None:
    got_line, got_key, message = playbook_error(tmp_path, old, new)
    assert (got_line, got_key) == (line, key)
    assert "not found" in message


@pytest.mark.parametrize(
    ("old", "new", "line", "key"),
    [
        ("timeout: 60", "timeout: .inf", 13, "steps[1].timeout"),
        ("timeout: 60", "timeout: .nan", 13, "steps[1].timeout"),
        ("stop_grace: 10", "stop_grace: 1e300", 8, "daemon.stop_grace"),
        ("params: {timeout: 30}", "params: {timeout: .inf}", 13, "steps[1].params.timeout"),
        ("params: {timeout: 30}", "params: {timeout: forever}", 13, "steps[1].params.timeout"),
        ("kind: validate,", "kind: validate, retry: {backoff: .inf},", 13,
         "steps[1].retry.backoff"),
    ],
)
def test_durations_are_finite_and_bounded(
    tmp_path: Path, old: str, new: str, line: int, key: str
) -> None:
    assert playbook_error(tmp_path, old, new)[:2] == (line, key)


@pytest.mark.parametrize("name", ["../evil", "-rf", "a/b", ""])
def test_executable_names_match_a_strict_pattern(tmp_path: Path, name: str) -> None:
    text = f"executables: ['{name}']"
    line, key, _ = playbook_error(tmp_path, "executables: [cuzk-daemon]", text)
    assert (line, key) == (2, "release.executables[0]")


def test_port_is_an_int_not_a_bool(tmp_path: Path) -> None:
    line, key, message = inventory_error(tmp_path, FLEET.replace("port: 22001", "port: true"))
    assert (line, key) == (4, "hosts[0].port")
    assert "not true" in message


def test_connect_timeout_is_finite(tmp_path: Path) -> None:
    text = FLEET.replace("known_hosts: known_hosts", "connect_timeout: .inf")
    assert inventory_error(tmp_path, text)[:2] == (2, "defaults.connect_timeout")


def test_a_known_hosts_folder_is_a_config_error(tmp_path: Path) -> None:
    (tmp_path / "known_hosts").mkdir()
    line, key, message = inventory_error(tmp_path, FLEET)
    assert (line, key) == (2, "defaults.known_hosts")
    assert "folder" in message


def test_a_known_hosts_that_turned_into_a_folder_is_a_host_key_error(tmp_path: Path) -> None:
    path = tmp_path / "fleet.yaml"
    path.write_text(FLEET)
    host = load_inventory(path).hosts[0]
    (tmp_path / "known_hosts").mkdir()
    with pytest.raises(HostKeyError, match="cannot read known_hosts"):
        SshTransport(host).run("true")


@pytest.mark.parametrize("text", ["../x", "..", "a/b", "-rf", "", "x" * 65, "a..b"])
def test_bad_release_ids(text: str) -> None:
    assert not is_release_id(text)
    with pytest.raises(StepFailed, match="not a release id"):
        Layout("/data").release_dir(text)


def test_good_release_ids() -> None:
    assert is_release_id("3f2a9c01b2d4")
    assert Layout("/data").release_dir("3f2a9c01b2d4") == "/data/releases/3f2a9c01b2d4"


def test_rollback_to_a_bad_release_id_is_a_user_error() -> None:
    with pytest.raises(UserError, match="not a release id"):
        run_fleet_rollback(RolloutRequest(hosts="nonexistent.yaml"), "../../etc")


@pytest.mark.parametrize("version", ["v3$(touch /tmp/pwned)", "v3;reboot", "a b", "x`id`"])
def test_a_hostile_version_is_refused_at_load_naming_the_key(version: str) -> None:
    """--set version=... renders into build.tag: a value that is no image tag is a config
    error naming the playbook line and the key, never a Docker API error mid-run."""
    from rollout.config.playbook import LAB_PLAYBOOK, parse_set_options

    with pytest.raises(ConfigError) as caught:
        load_playbook(LAB_PLAYBOOK, parse_set_options((f"version={version}",)))
    message = str(caught.value)
    assert "build.tag" in message and "lab.yaml:" in message and "is not a Docker image" in message
