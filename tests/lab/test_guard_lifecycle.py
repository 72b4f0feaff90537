"""A guard acts only when a controller really died (issue 16): a host refused at preflight,
or a controller killed before the host's first change, is never touched by a guard; a run
that adopts the hand-started daemon afterwards ends with one daemon, of the new release.
Waits are on states (polled with a bound), never on time."""

from __future__ import annotations

import json
import signal
import time
from pathlib import Path
from typing import Any

import pytest

from rollout import lab

from .conftest import LabFleet
from .rollout_helpers import (
    assert_serving,
    daemon_pid,
    reset_host,
    rollout_args,
    run_cli,
    serving_version,
    sh,
    start_cli,
)
from .test_ownership import FAST, KNOBS, cuzk_pids, hand_started, process_start

pytestmark = pytest.mark.lab
HOST = "lab-2"
SET = ("--set", f"lab_knobs={{{KNOBS}}}")
RUNS = "/data/rollout/runs"


@pytest.fixture(scope="module")
def fleet(lab_fleet: LabFleet, tmp_path_factory: pytest.TempPathFactory) -> LabFleet:
    reset_host(HOST)
    first = run_cli(tmp_path_factory.mktemp("base"), *rollout_args(lab_fleet.fleet_path, "base"),
                    *FAST, *SET)
    assert first.code == 0, first.stderr[-3000:]
    return lab_fleet


def guard_events() -> list[dict[str, Any]]:
    """Every event any guard wrote on the host, whatever its run (read by docker exec)."""
    text = sh(HOST, f"cat {RUNS}/*/guard.jsonl 2>/dev/null; true")
    return [json.loads(line) for line in text.splitlines() if line.strip()]


def guard_states(run_id: str, bound: float = 120) -> list[dict[str, Any]]:
    """The states of the run's guards once each is settled or ended (bounded wait)."""
    end = time.monotonic() + bound
    while True:
        text = sh(HOST, f"for f in {RUNS}/{run_id}/state.*.json; do [ -e \"$f\" ] && "
                  "cat \"$f\" && echo; done; true")
        states = [json.loads(line) for line in text.splitlines() if line.strip()]
        if all(s.get("settled") or s.get("ended") for s in states):
            return states
        if time.monotonic() >= end:
            raise AssertionError(f"guards of {run_id} still at it: {states}")
        time.sleep(0.1)


def assert_no_guard_acted(run_id: str) -> None:
    """The run's guard, started ahead, ended without arming and wrote nothing."""
    states = guard_states(run_id)
    assert states, f"no guard was started ahead for run {run_id}: nothing tested"
    for state in states:
        assert state.get("settled") or (state["ended"] == "inert" and not state["armed"]), state
    assert guard_events() == [], guard_events()
    assert lab.exec_on(HOST, "test -e /data/rollout/hold")[0] != 0, "a hold was set"


def test_refused_twice_then_adopted_no_guard_acts_and_one_daemon_is_left(
    fleet: LabFleet, tmp_path: Path
) -> None:
    hand = hand_started(HOST)
    started = process_start(HOST, pid=hand)
    args = (*rollout_args(fleet.fleet_path, "adopt-new"), *FAST, *SET)
    for attempt in ("refused-1", "refused-2"):
        (tmp_path / attempt).mkdir()
        run = run_cli(tmp_path / attempt, *args)
        end = run.host_end(HOST)
        assert run.code == 1 and "preflight failed" in end["reason"], end
        assert "host untouched" in end["reason"] and "--adopt" in end["reason"], end
        assert_no_guard_acted(run.events[0]["run_id"])
        assert cuzk_pids(HOST) == [hand] and process_start(HOST, hand) == started
        assert not [e for e in run.events if e["kind"] == "guard_report"]
    (tmp_path / "adopt").mkdir()
    adopted = run_cli(tmp_path / "adopt", *args, "--adopt")
    end = adopted.host_end(HOST)
    assert adopted.code == 0 and end["status"] == "validated", (end, adopted.stderr[-2000:])
    assert f"adopted and stopped daemon(s) {hand}" in adopted.steps(HOST)["stop"]["reason"]
    assert not [e for e in adopted.events if e["kind"] == "guard_report"]
    guard_states(adopted.events[0]["run_id"])  # its own guard settled
    assert guard_events() == [], guard_events()
    assert assert_serving(HOST) == "adopt-new"
    [pid] = cuzk_pids(HOST)  # exactly one daemon: the supervisor's, of the new release
    assert pid != hand
    current = sh(HOST, "readlink /data/current").strip().rsplit("/", 1)[-1]
    validated = json.loads(sh(HOST, "cat /data/rollout/validated.json"))
    assert validated["release"] == current and validated["pid"] == pid, (validated, current)
    validate = adopted.steps(HOST)["validate"]["reason"]
    assert f"recorded as validated on {current}" in validate, validate


def test_controller_killed_after_the_upload_no_guard_acts(
    fleet: LabFleet, tmp_path: Path
) -> None:
    """Killed once the upload is done, before the host's first change: its guard was started
    ahead, never armed: the host keeps serving its release, the very same daemon, and the
    resumed run finds nothing a guard did."""
    reset_host(HOST)
    base = run_cli(tmp_path, *rollout_args(fleet.fleet_path, "before-kill"), *FAST, *SET)
    assert base.code == 0, base.stderr[-3000:]
    old_pid, old_current = daemon_pid(HOST), sh(HOST, "readlink /data/current").strip()
    park = tmp_path / "park"
    park.mkdir()
    env = {"ROLLOUT_FAILPOINTS": "park-after-upload@controller", "ROLLOUT_PARK_DIR": str(park)}
    run = start_cli(tmp_path, *rollout_args(fleet.fleet_path, "killed-upload"), *FAST, *SET,
                    env=env)
    try:
        run.wait_for(lambda e: e["kind"] == "parked", timeout=300)
        run_id = run.events()[0]["run_id"]
        run.process.send_signal(signal.SIGKILL)
        run.process.wait()
    finally:
        (park / "park-after-upload.go").touch()
    assert_no_guard_acted(run_id)
    assert daemon_pid(HOST) == old_pid and serving_version(HOST) == "before-kill"
    assert sh(HOST, "readlink /data/current").strip() == old_current
    resumed = run_cli(tmp_path, "rollout", "--resume", run_id)
    assert resumed.code == 0, resumed.stderr[-3000:]
    assert not [e for e in resumed.events if e["kind"] == "guard_report"]
    assert assert_serving(HOST) == "killed-upload"
