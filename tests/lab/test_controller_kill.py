"""A controller's death never leaves a host stopped (issue 10): the run parks after each
step of a host (failpoints), the controller is SIGKILLed there and the host's sshd is taken
away, so that nobody can send it a command. The host's guard alone brings it to a
validated release, new or old; `--resume` then reports what the guard did and finishes."""

from __future__ import annotations

import signal
import time
from pathlib import Path
from typing import Any

import pytest

from rollout import lab

from .conftest import LabFleet
from .rollout_helpers import (
    FAST_KNOBS,
    assert_serving,
    jsonl,
    reset_host,
    rollout_args,
    run_cli,
    serving_version,
    sh,
    start_cli,
    status_json,
)

pytestmark = pytest.mark.lab
HOST = "lab-1"
FAST = ("--limit", HOST, "--set", f"lab_knobs={FAST_KNOBS}", "--set", "ready_timeout=15",
        "--set", "stop_grace=3", "--set", "drain_deadline=30")
BACK = ("stop", "drain", "switch", "start", "ready")  # killed here: back to the old release


@pytest.fixture(scope="module")
def fleet(lab_fleet: LabFleet, tmp_path_factory: pytest.TempPathFactory) -> LabFleet:
    reset_host(HOST)
    base = run_cli(tmp_path_factory.mktemp("base"), *rollout_args(lab_fleet.fleet_path, "base"),
                   *FAST)
    assert base.code == 0, base.stderr[-3000:]
    return lab_fleet


def guard_end(run_id: str, bound: float = 300) -> dict[str, Any]:
    """The guard's last event, read on the host (docker exec, not SSH), once it is written.
    The bound only ends a wait that would never end."""
    path = f"/data/rollout/runs/{run_id}/guard.jsonl"
    end = time.monotonic() + bound
    while time.monotonic() < end:
        found = [e for e in jsonl(HOST, path) if e["kind"] == "guard_end"]
        if found:
            return found[-1]
        time.sleep(0.1)
    raise AssertionError(f"no guard_end in {path}: {sh(HOST, f'cat {path} 2>&1; true')}")


def serving_unlocked_run(version: str) -> None:
    """What assert_serving checks, less the lock: the killed run's lock is still there."""
    release = sh(HOST, "readlink /data/current").strip()
    pid, _, exe = sh(HOST, "cat /data/rollout/daemon.pid").split()[:3]
    assert exe == f"/data/{release}/cuzk-daemon", (exe, release)
    assert sh(HOST, f"cut -d')' -f2 /proc/{pid}/stat").split()[0] in "RS"
    assert lab.exec_on(HOST, "test -e /data/rollout/hold")[0] != 0, "still on hold"
    assert set(status_json(HOST)) >= {"uptime_secs", "memory", "counters"}
    assert serving_version(HOST) == version


@pytest.mark.parametrize("phase", [*BACK, "validate"])
def test_controller_killed_after_each_step_leaves_the_host_validated(
    fleet: LabFleet, tmp_path: Path, phase: str
) -> None:
    park = tmp_path / "park"
    park.mkdir()
    version = f"kill-{phase}"
    old_version = serving_version(HOST)
    old_release = sh(HOST, "readlink /data/current").strip().rsplit("/", 1)[-1]
    env = {"ROLLOUT_FAILPOINTS": f"park-after-{phase}@controller", "ROLLOUT_PARK_DIR": str(park)}
    run = start_cli(tmp_path, *rollout_args(fleet.fleet_path, version), *FAST, env=env)
    try:
        run.wait_for(lambda e: e["kind"] == "parked", timeout=300)
        run.process.send_signal(signal.SIGKILL)
        run.process.wait()
        lab.stop_sshd(HOST)  # no command can reach the host from now on
        events = run.events()
        run_id = events[0]["run_id"]
        assert not [e for e in events if e["kind"] == "host_end"]
        done = {e["step"]: e["status"] for e in events if e["kind"] == "step_end"}
        assert done.get(phase) in ("ok", "changed"), done
        end = guard_end(run_id)
    finally:
        (park / f"park-after-{phase}.go").touch()
        lab.start_sshd(HOST)
    guard = jsonl(HOST, f"/data/rollout/runs/{run_id}/guard.jsonl")
    steps = [e["step"] for e in guard if e["kind"] == "step_end"]
    assert end["status"] == "validated", guard
    if phase in BACK:
        assert end["data"]["rolled_back"] is True, end
        assert steps == ["guard-stop", "guard-switch", "guard-start", "guard-ready",
                         "guard-validate"], guard
        assert all(e["status"] != "failed" for e in guard if e["kind"] == "step_end")
        serving_unlocked_run(old_version)
    else:
        assert steps == [] and "nothing to do" in end["reason"], guard
        serving_unlocked_run(version)
    takeover = next(e for e in guard if e["kind"] == "guard_takeover")
    want_phase = {"stop": "stopped", "drain": "stopped", "switch": "switched",
                  "start": "started", "ready": "started", "validate": "validated"}[phase]
    assert takeover["data"]["phase"] == want_phase, takeover

    resumed = run_cli(tmp_path, "rollout", "--resume", run_id)
    assert resumed.code == 0, resumed.stderr[-3000:]
    [report] = [e for e in resumed.events if e["kind"] == "guard_report"]
    assert report["host"] == HOST and report["status"] == "validated", report
    if phase in BACK:
        assert report["reason"] == (f"controller lost in phase {want_phase}; the host's guard "
                                    f"rolled back to {old_release}, validated"), report
    else:
        assert "the host's guard did nothing" in report["reason"], report
    assert assert_serving(HOST) == version
