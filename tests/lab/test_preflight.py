"""Preflight refuses a host before the old daemon is touched (issue 8): a build whose daemon
needs a library the host lacks, a budget below the proof's minimum, a host that shows no
memory limit, a CPU without a flag the build needs, GPUs nvidia-smi does not list. The old
daemon keeps serving."""

from __future__ import annotations

import re
from pathlib import Path

import docker
import pytest

from rollout import lab

from .conftest import LabFleet
from .rollout_helpers import (
    FAST_KNOBS,
    CliRun,
    assert_serving,
    daemon_pid,
    fresh_fleet,
    rollout_args,
    run_cli,
    sh,
)

pytestmark = pytest.mark.lab
HOST = "lab-2"


@pytest.fixture(scope="module")
def fleet(lab_fleet: LabFleet, tmp_path_factory: pytest.TempPathFactory) -> LabFleet:
    base = tmp_path_factory.mktemp("base")
    return fresh_fleet(lab_fleet, [HOST], lambda: deploy(base, lab_fleet, "pre-base"))


def deploy(work: Path, fleet: LabFleet, version: str, *extra: str) -> CliRun:
    args = rollout_args(fleet.fleet_path, version)
    return run_cli(work, *args, "--limit", HOST, "--set", f"lab_knobs={FAST_KNOBS}", *extra)


def refused(run: CliRun, step: str = "preflight") -> str:
    """The host was refused at that preflight step, before stop, and still serves."""
    assert run.code == 1, run.stderr[-3000:]
    end = run.host_end(HOST)
    assert end["status"] == "skipped" and "host untouched" in end["reason"], end
    steps = run.steps(HOST)
    assert steps[step]["status"] == "failed", steps
    assert "stop" not in steps and "drain" not in steps
    return str(steps[step]["reason"])


def test_build_needing_a_library_the_host_lacks_fails_at_preflight(
    fleet: LabFleet, tmp_path: Path
) -> None:
    pid = daemon_pid(HOST)
    run = deploy(tmp_path, fleet, "needs-lib", "--set", "fault=missing_library")
    reason = refused(run, "preflight-executables")
    assert "cuzk-daemon needs liblabonly.so.1 => not found" in reason, reason
    assert run.steps(HOST)["upload"]["status"] == "changed"
    assert daemon_pid(HOST) == pid
    assert assert_serving(HOST) == "pre-base"


def test_budget_below_the_proof_minimum_is_refused_with_both_numbers(
    fleet: LabFleet, tmp_path: Path
) -> None:
    pid = daemon_pid(HOST)
    reason = refused(deploy(tmp_path, fleet, "small-budget", "--set", "min_budget=1GiB"))
    # the 512 MiB limit less the 64 MiB margin less what the supervisor and sshd hold
    assert re.search(r"memory budget \d+\.0MiB \(\d+ bytes\) is below the minimum 1\.0GiB "
                     r"\(1073741824 bytes\) the proof needs \(preflight\.min_budget\); other "
                     r"processes hold ", reason), reason
    assert daemon_pid(HOST) == pid
    assert assert_serving(HOST) == "pre-base"


def test_cpu_without_a_flag_the_build_needs_is_refused(fleet: LabFleet, tmp_path: Path) -> None:
    run = deploy(tmp_path, fleet, "cpu", "--set", "cpu_flags=[fpu, lab_no_such_flag]")
    reason = refused(run)
    assert "the CPU lacks lab_no_such_flag, which the build needs" in reason, reason
    assert assert_serving(HOST) == "pre-base"


def test_gpus_are_checked_unless_the_host_has_none(fleet: LabFleet, tmp_path: Path) -> None:
    reason = refused(deploy(tmp_path, fleet, "gpu", "--set", "has_gpu=true"))
    assert reason.startswith("nvidia-smi failed on the host: "), reason
    assert assert_serving(HOST) == "pre-base"


def test_a_host_that_shows_no_memory_limit_is_refused_naming_the_setting(
    fleet: LabFleet, tmp_path: Path
) -> None:
    """Issue 17: with total_budget "cgroup", a host whose cgroup shows no memory limit is
    refused at preflight, naming daemon.total_budget; the budget is never sized from
    MemTotal (the machine's RAM). The lab host's limit is raised out of sight (2**62 bytes,
    which the host's reader counts as none, like cgroup v1's ~2**63) and put back after."""
    container = docker.from_env().containers.get(f"{lab.lab_prefix()}-{HOST}")
    pid = daemon_pid(HOST)
    container.update(mem_limit=1 << 62, memswap_limit=1 << 62)
    try:
        assert int(sh(HOST, "cat /sys/fs/cgroup/memory/memory.limit_in_bytes 2>/dev/null || "
                            "cat /sys/fs/cgroup/memory.max")) >= 1 << 60
        reason = refused(deploy(tmp_path, fleet, "no-limit"))
    finally:
        container.update(mem_limit="512m", memswap_limit="512m")
    assert "the host shows no cgroup memory limit" in reason, reason
    assert "set daemon.total_budget" in reason and "MemTotal" in reason, reason
    assert daemon_pid(HOST) == pid
    assert assert_serving(HOST) == "pre-base"
