"""rollout end to end on the lab fleet (issue 3's acceptance)."""

from __future__ import annotations

from pathlib import Path

import pytest

from .conftest import LabFleet
from .rollout_helpers import (
    FAST_KNOBS,
    host_snapshot,
    jsonl,
    reset_host,
    run_cli,
    sh,
    status_json,
)

pytestmark = pytest.mark.lab
STEPS = [
    "preflight",
    "supervise",
    "upload",
    "config",
    "stop",
    "drain",
    "switch",
    "start",
    "ready",
    "validate",
    "prune",
]


@pytest.fixture(scope="module")
def fleet(lab_fleet: LabFleet) -> LabFleet:
    for host in lab_fleet.hosts:
        reset_host(host.name)
    return lab_fleet


@pytest.fixture(scope="module")
def work(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("rollout")


def rollout(work: Path, fleet: LabFleet, version: str, *extra: str):  # type: ignore[no-untyped-def]
    return run_cli(
        work,
        "rollout",
        "--hosts",
        str(fleet.fleet_path),
        "--set",
        f"version={version}",
        "--set",
        f"lab_knobs={FAST_KNOBS}",
        *extra,
    )


def test_v1_onto_empty_hosts_then_v2(fleet: LabFleet, work: Path) -> None:
    first = rollout(work, fleet, "v1")
    assert first.code == 0, first.stderr[-3000:]
    second = rollout(work, fleet, "v2")
    assert second.code == 0, second.stderr[-3000:]
    release = next(e for e in second.events if e["step"] == "extract" and e["kind"] == "step_end")
    artifacts = release["data"]["release"]["artifacts"]
    release_id = release["data"]["release"]["id"]
    for host in fleet.hosts:
        assert sh(host.name, "readlink /data/current").strip() == f"releases/{release_id}"
        for name, meta in artifacts.items():
            on_host = sh(host.name, f"sha256sum /data/current/{name}").split()[0]
            assert on_host == meta["sha256"]
        assert status_json(host.name)["version"] == "v2"
        pid_line = sh(host.name, "cat /data/rollout/daemon.pid")
        assert f"/data/releases/{release_id}/cuzk-daemon" in pid_line
        steps = second.steps(host.name)
        assert [s for s in STEPS if s in steps] == STEPS, steps.keys()
        assert set(second.steps(host.name, "step_start")) >= set(STEPS)
        assert steps["validate"]["status"] == "ok"
        assert "COMPLETED" in steps["validate"]["data"]["output_tail"]
        assert second.host_end(host.name)["status"] == "validated"


def test_rerun_same_build_uploads_nothing(fleet: LabFleet, work: Path) -> None:
    run = rollout(work, fleet, "v2")
    assert run.code == 0, run.stderr[-3000:]
    for host in fleet.hosts:
        upload = run.steps(host.name)["upload"]
        assert upload["status"] == "skipped"
        assert "already on host, sha256 matches" in upload["reason"]
        assert run.steps(host.name)["stop"]["status"] == "skipped"


def test_dry_run_changes_nothing(fleet: LabFleet, work: Path) -> None:
    before = {h.name: host_snapshot(h.name) for h in fleet.hosts}
    run = rollout(work, fleet, "v3", "--dry-run")
    assert run.code == 0, run.stderr[-3000:]
    assert all(h.name in run.stdout for h in fleet.hosts)
    assert {h.name: host_snapshot(h.name) for h in fleet.hosts} == before


def test_canary_validates_before_any_other_host_stops(fleet: LabFleet, work: Path) -> None:
    run = rollout(work, fleet, "v4")
    assert run.code == 0, run.stderr[-3000:]
    canary, *others = [h.name for h in fleet.hosts]
    validated = run.steps(canary)["validate"]["time"]
    first_other_stop = min(run.steps(h, "step_start")["stop"]["time"] for h in others)
    assert validated < first_other_stop


def test_drain_waits_for_memory_through_a_late_reaper(fleet: LabFleet, work: Path) -> None:
    slow = "{pool_mib: 96, load_secs: 0.3, drain_mib_per_sec: 32, prove_secs: 0.1}"
    first = run_cli(
        work,
        "rollout",
        "--hosts",
        str(fleet.fleet_path),
        "--limit",
        "lab-1",
        "--set",
        "version=v5",
        "--set",
        f"lab_knobs={slow}",
        "--set",
        "daemon_launcher=lab-late-reaper 2 --",
    )
    assert first.code == 0, first.stderr[-3000:]
    run = run_cli(
        work,
        "rollout",
        "--hosts",
        str(fleet.fleet_path),
        "--limit",
        "lab-1",
        "--set",
        "version=v6",
        "--set",
        f"lab_knobs={slow}",
        "--set",
        "daemon_launcher=lab-late-reaper 2 --",
    )
    assert run.code == 0, run.stderr[-3000:]
    drain = jsonl("lab-1", "/data/rollout/drains.jsonl")[-1]
    start = jsonl("lab-1", "/data/rollout/starts.jsonl")[-1]
    assert drain["zombie_seen"], drain
    assert drain["memory_back_at"] - drain["died_at"] > 1.5, drain  # ~3 s of draining
    assert start["time"] > drain["memory_back_at"]
    assert drain["ended"] - drain["memory_back_at"] < 0.5
    limit = drain["memory"]["limit"]
    before_back = [u for t, u in drain["samples"] if t < drain["memory_back_at"]]
    assert before_back and max(before_back) > 0.10 * limit  # it really was still charged
