"""SSH as OpenSSH does it, on the lab: keys from a running ssh-agent when the inventory names
no key file, hosts named by a ~/.ssh/config alias, and a host reached through a jump host
(another lab host) at its address on the lab's docker network."""

from __future__ import annotations

import json
import os
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import docker
import pytest

from rollout import lab
from rollout.config.playbook import LAB_PLAYBOOK

from .conftest import FleetHost, LabFleet
from .rollout_helpers import FAST_KNOBS, CliRun, assert_serving, reset_host, run_cli

pytestmark = pytest.mark.lab


def lab_key(fleet: LabFleet) -> Path:
    return fleet.fleet_path.parent / "keys" / "id_ed25519"


def host_key_line(fleet: LabFleet, host: FleetHost, address: str) -> str:
    """The lab's known_hosts line of `host`, for `address` on port 22."""
    text = (fleet.fleet_path.parent / "known_hosts").read_text()
    line = next(x for x in text.splitlines() if x.startswith(f"[127.0.0.1]:{host.port} "))
    return f"{address} {line.split(' ', 1)[1]}"


def network_address(client: docker.DockerClient, host: str) -> str:
    container = client.containers.get(f"{lab.lab_prefix()}-{host}")
    return str(container.attrs["NetworkSettings"]["Networks"][lab.lab_prefix()]["IPAddress"])


def inventory(work: Path, fleet: LabFleet, hosts: list[str], defaults: list[str]) -> Path:
    """A fleet.yaml of the lab playbook; `hosts`: flow mappings; `defaults`: YAML lines."""
    known = work / "known_hosts"
    if not known.exists():
        known.write_text((fleet.fleet_path.parent / "known_hosts").read_text())
    lines = [f"playbook: {LAB_PLAYBOOK}", "defaults:", f"  known_hosts: {known}",
             "  host_key_policy: strict", *(f"  {x}" for x in defaults), "hosts:"]
    lines += [f"  - {h}" for h in hosts]
    path = work / "fleet.yaml"
    path.write_text("\n".join(lines) + "\n")
    return path


@pytest.fixture
def home(tmp_path: Path) -> dict[str, str]:
    """A HOME with an empty ~/.ssh (no default key there would log in), and the real
    cache, so that the stand-in build is not redone."""
    home = tmp_path / "home"
    (home / ".ssh").mkdir(parents=True, mode=0o700)
    cache = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return {"HOME": str(home), "XDG_CACHE_HOME": cache, "SSH_AUTH_SOCK": ""}


@pytest.fixture
def agent(tmp_path: Path, lab_fleet: LabFleet) -> Iterator[str]:
    """A running ssh-agent holding the lab key; its socket."""
    sock = tmp_path / "agent.sock"
    process = subprocess.Popen(["ssh-agent", "-D", "-a", str(sock)],
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 10
        while not sock.exists():
            assert process.poll() is None and time.monotonic() < deadline, "no ssh-agent"
            time.sleep(0.05)
        subprocess.run(["ssh-add", str(lab_key(lab_fleet))], check=True, capture_output=True,
                       env={**os.environ, "SSH_AUTH_SOCK": str(sock)})
        yield str(sock)
    finally:
        process.terminate()
        process.wait(timeout=10)


def status(tmp_path: Path, fleet_path: Path, env: dict[str, str]) -> dict[str, dict[str, Any]]:
    """`rollout status --json`: its row per host."""
    run = run_cli(tmp_path, "status", "--json", "--hosts", str(fleet_path), env=env)
    rows = {row["host"]: row for row in json.loads(run.stdout)["hosts"]}
    assert run.code == (0 if reached(rows) else 1), run.stdout + run.stderr  # 1: one is down
    return rows


def reached(rows: dict[str, dict[str, Any]]) -> bool:
    return all(row["state"] != "unreachable" for row in rows.values())


def rollout(tmp_path: Path, fleet_path: Path, version: str, env: dict[str, str]) -> CliRun:
    return run_cli(tmp_path, "rollout", "--hosts", str(fleet_path), "--set", f"version={version}",
                   "--set", f"lab_knobs={FAST_KNOBS}", env=env)


def test_no_key_file_logs_in_with_the_agent(
    lab_fleet: LabFleet, tmp_path: Path, home: dict[str, str], agent: str
) -> None:
    one = lab_fleet.hosts[0]
    reset_host(one.name)
    fleet = inventory(tmp_path, lab_fleet,
                      [f"{{name: {one.name}, address: 127.0.0.1, port: {one.port}}}"],
                      ["user: root", "ssh_config: null"])
    without = status(tmp_path, fleet, home)[one.name]  # no agent, no default key: no way in
    assert without["state"] == "unreachable", without
    assert "Authentication" in without["error"] or "authentication" in without["error"], without
    run = rollout(tmp_path, fleet, "agent-1", {**home, "SSH_AUTH_SOCK": agent})
    assert run.code == 0, run.stderr[-3000:]
    assert run.host_end(one.name)["status"] == "validated"
    assert assert_serving(one.name) == "agent-1"


def test_a_host_through_a_jump_host(
    lab_fleet: LabFleet, docker_client: docker.DockerClient, tmp_path: Path,
    home: dict[str, str],
) -> None:
    jump, target = lab_fleet.hosts[0], lab_fleet.hosts[1]
    reset_host(target.name)
    address = network_address(docker_client, target.name)
    hosts = [f"{{name: {target.name}, address: {address}, port: 22, "
             f"proxy_jump: 'root@127.0.0.1:{jump.port}'}}"]
    defaults = ["user: root", f"key_file: {lab_key(lab_fleet)}", "ssh_config: null"]
    fleet = inventory(tmp_path, lab_fleet, hosts, defaults)
    # The target's key is not known at its network address: refused, not accepted
    refused = status(tmp_path, fleet, home)[target.name]
    assert refused["state"] == "unreachable", refused
    assert f"host key unknown for {address}:22" in refused["error"], refused
    # Nor is the jump host's key taken on trust (which also shows the jump host is used:
    # the controller could reach the docker network directly)
    known = tmp_path / "known_hosts"
    known.write_text(host_key_line(lab_fleet, target, address) + "\n")
    refused = status(tmp_path, fleet, home)[target.name]
    assert f"host key unknown for 127.0.0.1:{jump.port}" in refused["error"], refused
    known.write_text((lab_fleet.fleet_path.parent / "known_hosts").read_text()
                     + host_key_line(lab_fleet, target, address) + "\n")
    seen = status(tmp_path, fleet, home)
    assert reached(seen), seen
    run = rollout(tmp_path, fleet, "jump-1", home)
    assert run.code == 0, run.stderr[-3000:]
    assert run.host_end(target.name)["status"] == "validated"
    assert assert_serving(target.name) == "jump-1"


def test_an_ssh_config_alias_and_its_proxyjump(
    lab_fleet: LabFleet, docker_client: docker.DockerClient, tmp_path: Path,
    home: dict[str, str],
) -> None:
    """Host aliases in ~/.ssh/config: HostName, Port, User, IdentityFile and ProxyJump."""
    jump, target = lab_fleet.hosts[0], lab_fleet.hosts[2]
    address = network_address(docker_client, target.name)
    (Path(home["HOME"]) / ".ssh" / "config").write_text(f"""\
Host gpu-direct
    HostName 127.0.0.1
    Port {jump.port}
    User root
    IdentityFile {lab_key(lab_fleet)}

Host gpu-behind
    HostName {address}
    User root
    IdentityFile {lab_key(lab_fleet)}
    ProxyJump gpu-direct
""")
    known = tmp_path / "known_hosts"
    known.write_text((lab_fleet.fleet_path.parent / "known_hosts").read_text()
                     + host_key_line(lab_fleet, target, address) + "\n")
    fleet = inventory(tmp_path, lab_fleet, [
        f"{{name: {jump.name}, address: gpu-direct}}",
        f"{{name: {target.name}, address: gpu-behind}}",
    ], [])
    seen = status(tmp_path, fleet, home)
    assert set(seen) == {jump.name, target.name} and reached(seen), seen
    # the same inventory with ssh_config off: the aliases are no addresses
    off = inventory(tmp_path, lab_fleet, [f"{{name: {jump.name}, address: gpu-direct}}"],
                    ["ssh_config: null"])
    refused = status(tmp_path, off, home)[jump.name]
    assert refused["state"] == "unreachable", refused
    assert "gpu-direct does not resolve" in refused["error"], refused
