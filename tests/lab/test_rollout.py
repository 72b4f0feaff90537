"""rollout end to end on the lab fleet (issue 3's acceptance)."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from .conftest import LabFleet
from .rollout_helpers import (
    FAST_KNOBS,
    assert_serving,
    fresh_fleet,
    host_snapshot,
    inventory_with,
    jsonl,
    rollout_args,
    run_cli,
    serving_version,
    sh,
    start_cli,
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
    return fresh_fleet(lab_fleet)


@pytest.fixture(scope="module")
def work(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("rollout")


def rollout(work: Path, fleet: LabFleet, version: str, *extra: str):  # type: ignore[no-untyped-def]
    return run_cli(
        work, *rollout_args(fleet.fleet_path, version), "--set", f"lab_knobs={FAST_KNOBS}", *extra
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
        assert serving_version(host.name) == "v2"
        pid_line = sh(host.name, "cat /data/rollout/daemon.pid")
        assert f"/data/releases/{release_id}/cuzk-daemon" in pid_line
        steps = second.steps(host.name)
        assert [s for s in STEPS if s in steps] == STEPS, steps.keys()
        assert set(second.steps(host.name, "step_start")) >= set(STEPS)
        assert steps["validate"]["status"] == "ok"
        assert "COMPLETED" in steps["validate"]["data"]["output_tail"]
        assert second.host_end(host.name)["status"] == "validated"


def test_rerun_same_build_uploads_nothing(fleet: LabFleet, work: Path) -> None:
    planned = rollout(work, fleet, "v2", "--dry-run")
    assert planned.code == 0, planned.stderr[-3000:]
    assert planned.stdout.count("already on host, sha256 matches") == 3, planned.stdout
    assert planned.stdout.count("already runs release") == 3 * 4, planned.stdout
    run = rollout(work, fleet, "v2")
    assert run.code == 0, run.stderr[-3000:]
    run_id = run.events[0]["run_id"]
    for host in fleet.hosts:
        upload = run.steps(host.name)["upload"]
        assert upload["status"] == "skipped"
        assert "already on host, sha256 matches" in upload["reason"]
        assert run.steps(host.name)["stop"]["status"] == "skipped"
        # nothing changed there, so no guard was started (a started guard writes its state)
        guards = sh(host.name, f"ls /data/rollout/runs/{run_id} 2>/dev/null | grep -c '^state' "
                               "|| true").strip()
        assert guards == "0", f"{host.name}: a guard was started for a rerun that changed nothing"


def test_dry_run_changes_nothing(fleet: LabFleet, work: Path) -> None:
    before = {h.name: host_snapshot(h.name) for h in fleet.hosts}
    run = rollout(work, fleet, "v3", "--dry-run")
    assert run.code == 0, run.stderr[-3000:]
    assert all(h.name in run.stdout for h in fleet.hosts)
    assert "would build" in run.stdout  # v3 was never built: the plan says so, builds nothing
    for host in fleet.hosts:
        after = host_snapshot(host.name)
        changed = set(after.splitlines()) ^ set(before[host.name].splitlines())
        assert not changed, f"{host.name}: {sorted(changed)}"


def test_canary_validates_before_any_other_host_stops(fleet: LabFleet, work: Path) -> None:
    run = rollout(work, fleet, "v4")
    assert run.code == 0, run.stderr[-3000:]
    canary, *others = [h.name for h in fleet.hosts]
    validated = run.steps(canary)["validate"]["time"]
    first_other_stop = min(run.steps(h, "step_start")["stop"]["time"] for h in others)
    assert validated < first_other_stop


def test_drain_waits_for_memory_through_a_late_reaper(fleet: LabFleet, work: Path) -> None:
    slow = "{pool_mib: 160, load_secs: 0.3, drain_mib_per_sec: 32, prove_secs: 0.1}"
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
    assert drain["zombie_seen"] and drain["drained_by"] == "budget", drain
    assert drain["died_at"] < drain["memory_back_at"] <= drain["ended"]
    assert start["time"] > drain["memory_back_at"]
    limit, budget = drain["memory"]["limit"], drain["budget"]
    before_back = [
        ws for t, ws in drain["samples"] if drain["started"] + t < drain["memory_back_at"]
    ]
    assert before_back and max(before_back) + budget > limit  # it really was still charged


def test_single_step_commands(fleet: LabFleet, work: Path) -> None:
    hosts = str(fleet.fleet_path)
    drained = run_cli(work, "drain", "lab-2", "--hosts", hosts)
    assert drained.code == 0, drained.stderr[-3000:]
    assert sh("lab-2", "ls /data/rollout/hold").strip() == "/data/rollout/hold"
    drain = jsonl("lab-2", "/data/rollout/drains.jsonl")[-1]
    assert drain["outcome"] == "drained" and drain["state"] == "gone", drain
    assert run_cli(work, "validate", "lab-2", "--hosts", hosts).code == 1  # nothing serves
    started = run_cli(work, "start", "lab-2", "--hosts", hosts)
    assert started.code == 0, started.stderr[-3000:]
    assert "status port answers" in started.stderr
    validated = run_cli(work, "validate", "lab-2", "--hosts", hosts)
    assert validated.code == 0, validated.stderr[-3000:]
    assert "COMPLETED" in validated.stderr
    assert_serving("lab-2")


def test_hosts_of_a_batch_roll_at_their_own_pace(fleet: LabFleet, work: Path) -> None:
    """lab-3 is held before its drain (a park point) until lab-1 and lab-2 of the same
    batch have validated: were a batch's hosts to wait for each other, they never would,
    and the bounded wait fails naming what it waited for. No timing decides anything."""
    park = work / "park-pace"
    park.mkdir()
    go = park / "park-before-drain.go"
    env = {"ROLLOUT_FAILPOINTS": "park-before-drain@lab-3", "ROLLOUT_PARK_DIR": str(park)}
    run = start_cli(work, *rollout_args(fleet.fleet_path, "pace"), "--set",
                    f"lab_knobs={FAST_KNOBS}", "--set", "serial=[3]", env=env)
    try:
        run.wait_for(lambda e: e["kind"] == "parked" and e["host"] == "lab-3", timeout=300)
        validated = wait_until(lambda: _validated(run.events()) >= {"lab-1", "lab-2"}, 300)
        assert validated, (
            "lab-1 and lab-2 did not validate while lab-3 was parked before its drain: "
            f"the hosts of a batch waited for each other (validated: {_validated(run.events())})"
        )
        assert "lab-3" not in _validated(run.events())
    finally:
        go.touch()
    done = run.finish()
    assert done.code == 0, done.stderr[-3000:]
    assert done.steps("lab-3")["validate"]["status"] == "ok"


def _validated(events: list[dict[str, Any]]) -> set[str]:
    return {e["host"] for e in events if e["kind"] == "step_end" and e["step"] == "validate"
            and e["status"] == "ok"}


def wait_until(check: Callable[[], bool], timeout: float) -> bool:
    """Poll `check` until it holds; `timeout` only bounds a wait that would never end."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return True
        time.sleep(0.2)
    return check()


def test_rollback_on_abort_all_reverts_validated_hosts(fleet: LabFleet, work: Path) -> None:
    before = {h.name: assert_serving(h.name) for h in fleet.hosts}
    bad = (
        "lab_knobs: {pool_mib: 32, load_secs: 0.3, drain_mib_per_sec: 256, prove_secs: 0.1, "
        "fault: fail_validation}"
    )
    inventory = inventory_with(work, fleet.fleet_path, "lab-2", bad)
    run = run_cli(
        work,
        "rollout",
        "--hosts",
        str(inventory),
        "--set",
        "version=aborted",
        "--set",
        "serial=[1]",
        "--set",
        "rollback_on_abort=all",
    )
    assert run.code == 1, run.stderr[-3000:]
    ends = [e for e in run.events if e["kind"] == "host_end"]
    assert [(e["host"], e["status"]) for e in ends] == [
        ("lab-1", "validated"),
        ("lab-2", "rolled_back"),
        ("lab-1", "rolled_back"),
    ]
    assert {h.name: assert_serving(h.name) for h in fleet.hosts} == before
