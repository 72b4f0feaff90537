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
    daemon_pid,
    fresh_fleet,
    jsonl,
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
# A pool that cannot fit beside the budget while it is held (limit 512 MiB less the 64 MiB
# margin less what other processes hold, rounded up to 64 MiB: 384 MiB, or 320 MiB when
# they hold over 64 MiB; issue 17), and whose release is a fall of well over 100 MiB before
# the working set fits either budget (192 MiB fell by as little as 64 + 50 MiB then).
BIG_POOL = ("--set", "lab_knobs={pool_mib: 256, load_secs: 0.3, drain_mib_per_sec: 256, "
            "prove_secs: 0.1}")
POOL_HOLD = "/dev/shm/lab-pool-hold"  # while it exists, a dead daemon's pool stays charged
MIB = 1 << 20


@pytest.fixture(scope="module")
def fleet(lab_fleet: LabFleet, tmp_path_factory: pytest.TempPathFactory) -> LabFleet:
    work = tmp_path_factory.mktemp("base")
    return fresh_fleet(lab_fleet, [HOST], lambda: run_cli(
        work, *rollout_args(lab_fleet.fleet_path, "base"), *FAST))


@pytest.fixture(autouse=True)
def no_lock_left(fleet: LabFleet) -> None:
    """A case that failed before its --resume leaves its killed run's lock on the host: not
    the next case's business."""
    sh(HOST, "rm -f /data/rollout/lock")


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


def guard_events(run_id: str, step: str, bound: float = 300) -> list[dict[str, Any]]:
    """The guard's events once one of them starts `step` (read by docker exec). The bound
    only ends a wait that would never end."""
    path = f"/data/rollout/runs/{run_id}/guard.jsonl"
    end = time.monotonic() + bound
    while time.monotonic() < end:
        found = jsonl(HOST, path)
        if any(e["kind"] == "step_start" and e["step"] == step for e in found):
            return found
        time.sleep(0.1)
    raise AssertionError(f"no {step} in {path}: {sh(HOST, f'cat {path} 2>&1; true')}")


def assert_guard_drained(phase: str, guard: list[dict[str, Any]], stopped: int | None) -> None:
    """The guard's drain (ops.drain) ran between its stop and its start, with the playbook's
    budget (limit less its 64 MiB margin and what other processes hold). Killed after stop,
    the old daemon's pool was held: the guard waited until it was back. Killed after start
    or ready, the guard stopped the new daemon itself and drained that very process (pid
    and start time): gone.
    `stopped`: the pid of the old daemon the controller stopped."""
    ends = {e["step"]: e for e in guard if e["kind"] == "step_end"}
    stop, drain = ends["guard-stop"], ends["guard-drain"]
    data = drain["data"]
    assert data["outcome"] == "drained" and data["state"] == "gone", drain
    held = data["memory"]["limit"] - 64 * MIB - data["budget"]  # margin, then neighbours
    assert held > 0 and held % (64 * MIB) == 0, drain  # what they hold, rounded up to 64 MiB
    assert data["working_set"] + data["budget"] <= data["memory"]["limit"], drain
    if phase == "stop":  # the pool was seen, held, and waited for
        seen = [ws for _, ws in data["samples"] if ws is not None]
        assert drain["status"] == "ok" and max(seen) - min(seen) >= 100 * MIB, drain
    if phase in ("start", "ready"):  # the guard stopped the new release's daemon itself
        assert stop["status"] == "changed", stop
        assert (data["pid"], data["starttime"]) == (stop["data"]["pid"],
                                                    stop["data"]["starttime"]), (stop, drain)
        assert drain["reason"].startswith("old daemon gone and "), drain  # judge.py's words
    elif phase == "stop" and data["pid"]:  # a zombie still, the supervisor not there yet
        assert stop["status"] == "skipped" and data["pid"] == stopped, (stop, drain, stopped)
    else:  # the controller had stopped the old daemon: the guard waits for the memory alone
        assert stop["status"] == "skipped" and data["pid"] == 0, (stop, drain)
        assert "no daemon stopped here" in drain["reason"], drain


@pytest.mark.parametrize("phase", [*BACK, "validate"])
def test_controller_killed_after_each_step_leaves_the_host_validated(
    fleet: LabFleet, tmp_path: Path, phase: str
) -> None:
    park = tmp_path / "park"
    park.mkdir()
    version = f"kill-{phase}"
    if phase == "stop":  # the daemon the controller stops has a big pool, held after it dies
        pool = run_cli(tmp_path, *rollout_args(fleet.fleet_path, "big-pool"), *FAST, *BIG_POOL)
        assert pool.code == 0, pool.stderr[-3000:]
        sh(HOST, f"touch {POOL_HOLD}")
    old_version = serving_version(HOST)
    old_pid = daemon_pid(HOST)
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
        if phase == "stop":  # the guard drains while the pool is held; then it comes back
            guard_events(run_id, "guard-drain")
            sh(HOST, f"rm -f {POOL_HOLD}")
        end = guard_end(run_id)
    finally:
        sh(HOST, f"rm -f {POOL_HOLD}")
        (park / f"park-after-{phase}.go").touch()
        lab.start_sshd(HOST)
    guard = jsonl(HOST, f"/data/rollout/runs/{run_id}/guard.jsonl")
    ended = [e for e in guard if e["kind"] == "step_end"]
    # the lab playbook cordons (curio) before the stop: whatever it did, the guard uncordons last
    assert ended and ended[-1]["step"] == "guard-uncordon", guard
    assert ended[-1]["status"] == "changed" and not lab.cordoned(HOST), ended[-1]
    steps = [e["step"] for e in ended[:-1]]
    assert end["status"] == "validated", guard
    if phase in BACK:
        assert end["data"]["rolled_back"] is True, end
        assert steps == ["guard-stop", "guard-drain", "guard-switch", "guard-start",
                         "guard-ready", "guard-validate"], guard
        assert all(e["status"] != "failed" for e in guard if e["kind"] == "step_end")
        assert_guard_drained(phase, guard, old_pid)
        serving_unlocked_run(old_version)
    else:
        assert steps == [] and "nothing to do" in end["reason"], guard
        serving_unlocked_run(version)
    takeover = next(e for e in guard if e["kind"] == "guard_takeover")
    want_phase = {"stop": "stopped", "drain": "stopped", "switch": "switched",
                  "start": "started", "ready": "started", "validate": "validated"}[phase]
    assert takeover["data"]["phase"] == want_phase, takeover

    hosts = ("--hosts", str(fleet.fleet_path), "--limit", HOST)
    status = run_cli(tmp_path, "status", *hosts)  # shows what the guard did; marks nothing
    assert (f"{HOST}  guard  guard of run {run_id}: controller lost in phase {want_phase}; "
            "the host's guard ") in status.stdout, status.stdout[-3000:]
    resumed = run_cli(tmp_path, "rollout", "--resume", run_id)
    assert resumed.code == 0, resumed.stderr[-3000:]
    assert "  guard  " not in run_cli(tmp_path, "status", *hosts).stdout  # shown: once
    [report] = [e for e in resumed.events if e["kind"] == "guard_report"]
    assert report["host"] == HOST and report["status"] == "validated", report
    assert report["reason"] in resumed.stderr, resumed.stderr[-3000:]  # on the console too
    if phase in BACK:
        assert report["reason"] == (f"controller lost in phase {want_phase}; the host's guard "
                                    f"rolled back to {old_release}, validated"), report
    else:
        assert "the host's guard did nothing" in report["reason"], report
    assert assert_serving(HOST) == version


def test_controller_killed_after_the_config_step_leaves_the_old_config(
    fleet: LabFleet, tmp_path: Path
) -> None:
    """The config step runs once the host is stopped (after stop and drain): killed right
    after it wrote a new config, the guard takes the host back in phase stopped, and the
    old release runs again with the very config it ran with."""
    park = tmp_path / "park"
    park.mkdir()
    old_version = serving_version(HOST)
    config = sh(HOST, "cat /data/zk/cuzk.toml")
    knobs = FAST_KNOBS.replace("prove_secs: 0.1", "prove_secs: 0.11")  # a config of its own
    assert knobs != FAST_KNOBS
    env = {"ROLLOUT_FAILPOINTS": "park-after-config@controller", "ROLLOUT_PARK_DIR": str(park)}
    run = start_cli(tmp_path, *rollout_args(fleet.fleet_path, "kill-config"), *FAST,
                    "--set", f"lab_knobs={knobs}", env=env)
    try:
        run.wait_for(lambda e: e["kind"] == "parked", timeout=300)
        written = sh(HOST, "cat /data/zk/cuzk.toml")
        run.process.send_signal(signal.SIGKILL)
        run.process.wait()
        lab.stop_sshd(HOST)
        run_id = run.events()[0]["run_id"]
        end = guard_end(run_id)
    finally:
        (park / "park-after-config.go").touch()
        lab.start_sshd(HOST)
    assert written != config  # the new config was written while the host was stopped
    assert end["status"] == "validated" and end["data"]["rolled_back"] is True, end
    assert end["data"]["phase"] == "stopped", end
    assert sh(HOST, "cat /data/zk/cuzk.toml") == config
    serving_unlocked_run(old_version)
    resumed = run_cli(tmp_path, "rollout", "--resume", run_id)
    assert resumed.code == 0, resumed.stderr[-3000:]
