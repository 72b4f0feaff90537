"""IPFS_GATEWAY on a lab host, as curio reads it (issue 27): with no params_gateway in the
playbook, a host whose SSH session has IPFS_GATEWAY downloads a missing param file from it
(the lab's web server, on the lab network: nothing else is ever asked); a bad value is
refused before the stop, naming the host and the value, never used nor run; params_gateway,
when set, wins over it."""

from __future__ import annotations

import shlex
from collections.abc import Iterator
from pathlib import Path

import pytest

from rollout.lab.web import WebServer

from .conftest import POREP_PARAMS, LabFleet
from .rollout_helpers import CliRun, assert_serving, daemon_pid, fresh_fleet, run_cli, sh
from .rollout_helpers import rollout_args as args_for
from .test_params_source import FAST, PARAMS, VK, entry, ipfs_gets, mirror, put_on

pytestmark = pytest.mark.lab
__all__ = ["mirror"]  # the module's fixture, shared with test_params_source


@pytest.fixture(scope="module")
def fleet(lab_fleet: LabFleet) -> LabFleet:
    return fresh_fleet(lab_fleet, ("lab-1", "lab-2"))


@pytest.fixture(scope="module")
def work(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("params-gateway")


@pytest.fixture
def ipfs_gateway() -> Iterator[list[str]]:
    """The hosts set_gateway gave an IPFS_GATEWAY: removed again after the test."""
    hosts: list[str] = []
    yield hosts
    for host in hosts:
        sh(host, "sed -i '/^export IPFS_GATEWAY=/d' /root/.bashrc")


def set_gateway(hosts: list[str], host: str, value: str) -> None:
    """IPFS_GATEWAY in root's ~/.bashrc (bash reads it for an SSH command): where an operator
    sets it for the `curio fetch-params` of their own SSH sessions."""
    line = shlex.quote(f"export IPFS_GATEWAY={shlex.quote(value)}")
    sh(host, f"printf '%s\\n' {line} >> /root/.bashrc")
    hosts.append(host)


def deploy(work: Path, fleet: LabFleet, host: str, version: str, *more: str) -> CliRun:
    """A rollout of one host that pushes nothing, with no params_gateway unless `more` sets
    one: a missing file comes from where the host says."""
    return run_cli(work, *args_for(fleet.fleet_path, version), *FAST, "--limit", host,
                   "--set", "params_source=", *more)


def test_a_host_downloads_a_missing_file_from_its_ipfs_gateway(
    fleet: LabFleet, mirror: WebServer, work: Path, ipfs_gateway: list[str]
) -> None:
    sh("lab-1", f"rm -rf {PARAMS} /var/tmp/filecoin-proof-parameters")
    put_on("lab-1", PARAMS, [VK])  # the .params file is the one missing
    set_gateway(ipfs_gateway, "lab-1", f"{mirror.url}/ipfs/")
    before = len(ipfs_gets(mirror))
    run = deploy(work, fleet, "lab-1", "from-ipfs-gateway")
    assert run.code == 0, run.stderr[-3000:]
    wanted = entry(POREP_PARAMS)
    reason = run.steps("lab-1")["preflight"]["reason"]
    assert f"{POREP_PARAMS} downloaded ({wanted.size} bytes), verified" in reason, reason
    assert f"downloads from {mirror.url}/ipfs/ (IPFS_GATEWAY on the host)" in reason, reason
    assert ipfs_gets(mirror)[before:] == [f"/ipfs/{wanted.cid}"]
    assert assert_serving("lab-1") == "from-ipfs-gateway"


def test_a_bad_ipfs_gateway_is_refused_before_the_stop_and_params_gateway_wins(
    fleet: LabFleet, mirror: WebServer, work: Path, ipfs_gateway: list[str]
) -> None:
    sh("lab-2", f"rm -rf {PARAMS} /var/tmp/filecoin-proof-parameters /tmp/ran")
    put_on("lab-2", PARAMS, [VK])
    bad = f"{mirror.url}/ipfs/ $(touch /tmp/ran) --output=/etc/x"
    set_gateway(ipfs_gateway, "lab-2", bad)
    pid, before = daemon_pid("lab-2"), len(ipfs_gets(mirror))
    run = deploy(work, fleet, "lab-2", "never-bad-gateway")
    assert run.code == 1
    preflight = run.steps("lab-2")["preflight"]
    assert preflight["status"] == "failed", preflight
    assert f"IPFS_GATEWAY on lab-2 is {bad!r}" in preflight["reason"], preflight["reason"]
    assert "refused, never used" in preflight["reason"]
    assert "stop" not in run.steps("lab-2") and daemon_pid("lab-2") == pid
    assert ipfs_gets(mirror)[before:] == [] and sh("lab-2", "ls /tmp/ran 2>&1 || true") \
        .strip().endswith("No such file or directory")
    run = deploy(work, fleet, "lab-2", "params-gateway-wins",
                 "--set", f"params_gateway={mirror.url}")
    assert run.code == 0, run.stderr[-3000:]
    reason = run.steps("lab-2")["preflight"]["reason"]
    assert f"downloads from {mirror.url}/ipfs/ (params.gateway)" in reason, reason
    assert ipfs_gets(mirror)[before:] == [f"/ipfs/{entry(POREP_PARAMS).cid}"]
