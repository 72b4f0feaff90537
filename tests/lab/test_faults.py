"""The fault matrix (issue 4): whatever goes wrong, every host ends serving a validated
daemon, the new release or the one it had. Each case ends by reading the hosts directly."""

from __future__ import annotations

import json
import shlex
import shutil
import signal
import socket
import time
from pathlib import Path

import pytest

from rollout import lab
from rollout.steps.kinds.preflight import SPACE_MARGIN

from .conftest import LabFleet
from .rollout_helpers import (
    REPO,
    Background,
    CliRun,
    assert_serving,
    daemon_pid,
    fresh_fleet,
    inventory_with,
    poll,
    rollout_args,
    run_cli,
    sh,
    start_cli,
)

pytestmark = pytest.mark.lab
FAST = (
    "--set",
    "lab_knobs={pool_mib: 32, load_secs: 0.3, drain_mib_per_sec: 256, prove_secs: 0.1}",
    "--set",
    "ready_timeout=15",
    "--set",
    "stop_grace=3",
    "--set",
    "drain_deadline=30",
)
SLOW_DRAIN = (
    "--set",
    "lab_knobs={pool_mib: 96, load_secs: 0.3, drain_mib_per_sec: 32, prove_secs: 0.1}",
)
HOSTS = ["lab-1", "lab-2", "lab-3"]
POOL_HOLD = "/dev/shm/lab-pool-hold"  # while it exists, a dead daemon's pool stays charged


@pytest.fixture(scope="module")
def fleet(lab_fleet: LabFleet, tmp_path_factory: pytest.TempPathFactory) -> LabFleet:
    base = tmp_path_factory.mktemp("base")
    return fresh_fleet(lab_fleet, HOSTS, lambda: deploy(base, lab_fleet, "base"))


@pytest.fixture
def work(tmp_path: Path) -> Path:
    return tmp_path


def deploy(
    work: Path, fleet: LabFleet, version: str, *extra: str, env: dict[str, str] | None = None
) -> CliRun:
    return run_cli(work, *rollout_args(fleet.fleet_path, version), *FAST, *extra, env=env)


def start_slow_deploy(work: Path, fleet: LabFleet, version: str) -> Background:
    """A rollout in the background whose drains take seconds: time to interfere with it."""
    return start_cli(work, *rollout_args(fleet.fleet_path, version), *FAST, *SLOW_DRAIN)


def serving_everywhere() -> dict[str, str]:
    return {host: assert_serving(host) for host in HOSTS}


def test_new_build_crashes_at_start_canary_rolls_back_others_untouched(
    fleet: LabFleet, work: Path
) -> None:
    before = {h: daemon_pid(h) for h in HOSTS}
    old = serving_everywhere()
    run = deploy(work, fleet, "crash", "--set", "fault=crash_at_start")
    assert run.code == 1
    canary = run.host_end("lab-1")
    assert canary["status"] == "rolled_back", canary
    assert "died during start-up" in canary["reason"]
    assert not any(e["host"] in ("lab-2", "lab-3") for e in run.events if e["kind"] == "step_start")
    assert {h: daemon_pid(h) for h in ("lab-2", "lab-3")} == {
        h: before[h] for h in ("lab-2", "lab-3")
    }
    assert serving_everywhere() == old


def test_new_build_fails_validation_rolls_back(fleet: LabFleet, work: Path) -> None:
    old = assert_serving("lab-2")
    run = deploy(work, fleet, "noproof", "--set", "fault=fail_validation", "--limit", "lab-2")
    assert run.code == 1
    end = run.host_end("lab-2")
    assert end["status"] == "rolled_back" and "validate failed" in end["reason"], end
    validate = run.steps("lab-2")["validate"]
    assert "status:    FAILED" in validate["data"]["output"], validate
    assert validate["data"]["failure"] == "step_failed"
    assert assert_serving("lab-2") == old


def test_build_that_ignores_sigterm_is_killed_after_the_grace(fleet: LabFleet, work: Path) -> None:
    stubborn = deploy(work, fleet, "stubborn", "--set", "fault=ignore_sigterm", "--limit", "lab-3")
    assert stubborn.code == 0, stubborn.stderr[-3000:]
    run = deploy(work, fleet, "after-stubborn", "--limit", "lab-3")
    assert run.code == 0, run.stderr[-3000:]
    stop = run.steps("lab-3")["stop"]
    assert stop["data"]["escalated"] is True, stop
    assert stop["data"]["killed_at"] - stop["data"]["signalled_at"] >= 3
    assert assert_serving("lab-3") == "after-stubborn"


def test_unreachable_host_is_reported_and_the_rest_roll(fleet: LabFleet, work: Path) -> None:
    pid = daemon_pid("lab-2")
    lab.stop_sshd("lab-2")
    try:
        run = deploy(work, fleet, "while-down")
    finally:
        lab.start_sshd("lab-2")
    assert run.code == 1
    assert run.host_end("lab-2")["status"] == "unreachable"
    assert run.host_end("lab-3")["status"] == "validated"
    assert daemon_pid("lab-2") == pid
    versions = serving_everywhere()
    assert versions["lab-1"] == versions["lab-3"] == "while-down"


@pytest.mark.parametrize(
    ("failpoint", "host", "evidence"),
    [
        ("upload-drop", "lab-1", "upload of"),  # the SSH socket closed mid-upload
        ("upload-corrupt", "lab-2", "sha256 mismatch"),  # a byte flipped on the way
    ],
)
def test_broken_upload_is_caught_and_retried(
    fleet: LabFleet, work: Path, failpoint: str, host: str, evidence: str
) -> None:
    run = deploy(
        work, fleet, failpoint, "--limit", host, env={"ROLLOUT_FAILPOINTS": f"{failpoint}@{host}:1"}
    )
    assert run.code == 0, run.stderr[-3000:]
    retry = next(e for e in run.events if e["kind"] == "retry" and e["step"] == "upload")
    assert evidence in retry["reason"], retry
    assert assert_serving(host) == failpoint


def test_injection_in_host_vars_is_inert(fleet: LabFleet, work: Path) -> None:
    inventory = inventory_with(work, fleet.fleet_path, "lab-3", 'job: "x; touch /tmp/pwned"')
    playbook = work / "play.yaml"
    source = (REPO / "playbooks" / "lab.yaml").read_text()
    source = source.replace("../dockerfiles", str(REPO / "dockerfiles"))
    source = source.replace("source: files/c1.json", f"source: {REPO}/playbooks/files/c1.json")
    source = source.replace("params_source: files/", f"params_source: {REPO}/playbooks/files/")
    argv = 'command: [sh, -c, \'echo job "$1"; shift; exec "$@"\', _, "{{ job }}", "{{'
    source = source.replace('command: ["{{', argv, 1)  # an inventory value: an argv item
    source = source.replace("  ready_timeout: 60 ", '  job: "none"\n  ready_timeout: 60 ')
    playbook.write_text(source)
    run = run_cli(
        work,
        "rollout",
        "--hosts",
        str(inventory),
        "--playbook",
        str(playbook),
        "--limit",
        "lab-3",
        "--set",
        "version=injected",
        *FAST,
    )
    assert run.code == 0, run.stderr[-3000:]
    assert lab.exec_on("lab-3", "test -e /tmp/pwned")[0] != 0
    assert "x; touch /tmp/pwned" in run.steps("lab-3")["validate"]["data"]["output_tail"]
    assert assert_serving("lab-3") == "injected"


def test_stale_lock_blocks_until_broken(fleet: LabFleet, work: Path) -> None:
    holder = {
        "run_id": "old-run",
        "operator": "alice",
        "controller": socket.gethostname(),
        "pid": 999999,
        "started": time.time() - 7200,
        "version": "old",
    }
    # no heartbeat for two hours (the lock's mtime on the host is its last heartbeat)
    sh("lab-1", f"echo '{json.dumps(holder)}' > /data/rollout/lock && "
                "touch -d '2 hours ago' /data/rollout/lock")
    blocked = deploy(work, fleet, "after-lock", "--limit", "lab-1")
    assert blocked.code == 4, blocked.stderr[-3000:]
    assert "old-run" in blocked.stderr and "alice" in blocked.stderr
    assert "--break-lock" in blocked.stderr
    broken = deploy(work, fleet, "after-lock", "--limit", "lab-1", "--break-lock")
    assert broken.code == 0, broken.stderr[-3000:]
    assert any(e["kind"] == "lock_broken" and "old-run" in e["reason"] for e in broken.events)
    assert assert_serving("lab-1") == "after-lock"


@pytest.mark.parametrize("text", ["", "null", '{"run_id": "cut-sh'])
def test_unreadable_lock_is_an_unknown_holder_not_taken_over(
    fleet: LabFleet, work: Path, text: str
) -> None:
    sh("lab-2", f"printf %s {shlex.quote(text)} > /data/rollout/lock")
    try:
        blocked = deploy(work, fleet, "over-garbage", "--limit", "lab-2")
        assert blocked.code == 4, blocked.stderr[-3000:]
        assert "unknown holder" in blocked.stderr and "--break-lock" in blocked.stderr
        assert sh("lab-2", "cat /data/rollout/lock") == text
        assert "stop" not in blocked.steps("lab-2")
    finally:
        sh("lab-2", "rm -f /data/rollout/lock")


def other_checkout(work: Path, fleet: LabFleet) -> Path:
    """A second CI runner: its own copy of the repository's playbooks and Dockerfiles and
    of the lab's inventory, keys and known_hosts, in another folder. Returns its inventory."""
    root = work / "checkout-2"
    for name in ("playbooks", "dockerfiles"):
        shutil.copytree(REPO / name, root / name)
    lab_dir = fleet.fleet_path.parent
    shutil.copytree(lab_dir / "keys", root / "lab" / "keys")
    shutil.copy2(lab_dir / "known_hosts", root / "lab" / "known_hosts")
    shutil.copy2(fleet.fleet_path, root / "lab" / "fleet.yaml")
    return root / "lab" / "fleet.yaml"


def test_two_rollouts_at_once(fleet: LabFleet, work: Path) -> None:
    """A run holds every host's lock from before its first batch to its end, so a second
    one, from this checkout or another, is refused (exit 4, naming the holder). The first
    run parks at two known points (failpoints): no timing decides anything here."""
    park = work / "park"
    park.mkdir()
    env = {
        "ROLLOUT_FAILPOINTS": "park-after-locks@controller,park-before-unlock@controller",
        "ROLLOUT_PARK_DIR": str(park),
    }
    first = start_cli(work, *rollout_args(fleet.fleet_path, "first"), *FAST, env=env)
    other = other_checkout(work, fleet)
    try:
        first.wait_for(lambda e: e["kind"] == "parked")
        run_id = first.events()[0]["run_id"]
        assert "stop" not in {e["step"] for e in first.events() if e["kind"] == "step_end"}
        second = deploy(work, fleet, "second")
        assert second.code == 4, second.stderr[-3000:]
        assert f"locked by run {run_id}" in second.stderr
        third = run_cli(work, *rollout_args(other, "third"), *FAST, "--limit", "lab-3",
                        cwd=other.parents[1])
        assert third.code == 4, third.stderr[-3000:]
        assert f"lab-3 is locked by run {run_id}" in third.stderr
        single = run_cli(work, "stop", "lab-2", "--hosts", str(other), cwd=other.parents[1])
        assert single.code == 4, single.stderr[-3000:]
        assert f"lab-2 is locked by run {run_id}" in single.stderr
        (park / "park-after-locks.go").touch()
        first.wait_for(lambda e: e["kind"] == "parked" and "unlock" in e["reason"])
        assert {e["host"] for e in first.events() if e["kind"] == "host_end"} == set(HOSTS)
        fourth = run_cli(work, *rollout_args(other, "fourth"), *FAST, "--limit", "lab-1",
                         cwd=other.parents[1])
        assert fourth.code == 4, fourth.stderr[-3000:]
        assert f"lab-1 is locked by run {run_id}" in fourth.stderr
    finally:
        for name in ("park-after-locks", "park-before-unlock"):
            (park / f"{name}.go").touch()
    done = first.finish()
    assert done.code == 0, done.stderr[-3000:]
    assert set(serving_everywhere().values()) == {"first"}


def bystander(host: str) -> tuple[int, int]:
    """A process on the host that is not rollout's: (pid, its real start time)."""
    pid = int(sh(host, "nohup sleep 100000 > /dev/null 2>&1 < /dev/null & echo $!").split()[0])
    return pid, int(sh(host, f"cut -d' ' -f22 /proc/{pid}/stat"))


def running(host: str, pid: int) -> bool:
    return lab.exec_on(host, f"grep -qv '^[^)]*) [ZX] ' /proc/{pid}/stat")[0] == 0


def test_forged_daemon_pid_never_gets_a_bystander_signalled(fleet: LabFleet, work: Path) -> None:
    """daemon.pid names another process with that process's real start time, with no
    executable or with our daemon's: stop signals nothing, says why, and exits 1."""
    original = sh("lab-3", "cat /data/rollout/daemon.pid").strip()
    pid, start = bystander("lab-3")
    try:
        for exe in ("", f" {original.split()[2]}"):
            sh("lab-3", f"echo '{pid} {start}{exe}' > /data/rollout/daemon.pid")
            stopped = run_cli(work, "stop", "lab-3", "--hosts", str(fleet.fleet_path))
            assert stopped.code == 1, stopped.stderr[-3000:]  # it did not stop (issue 18)
            assert "nothing signalled" in stopped.stderr and "not a daemon" in stopped.stderr
            assert "stop lab-3: not done: nothing was stopped" in stopped.stderr
            assert running("lab-3", pid)
    finally:
        sh("lab-3", f"kill -KILL {pid}; echo '{original}' > /data/rollout/daemon.pid")
    started = run_cli(work, "start", "lab-3", "--hosts", str(fleet.fleet_path))
    assert started.code == 0, started.stderr[-3000:]
    assert_serving("lab-3")


def test_forged_supervisor_pid_never_gets_a_bystander_killed(fleet: LabFleet, work: Path) -> None:
    """The supervisor's script changed on the host, so `start` restarts the supervisor; its
    pidfile names another process with its real start time, which must live on."""
    original = sh("lab-2", "cat /data/rollout/supervisor.pid").strip()
    pid, start = bystander("lab-2")
    try:
        sh("lab-2", "echo '# changed' >> /data/rollout/supervisor.py && "
                    f"echo '{pid} {start}' > /data/rollout/supervisor.pid")
        started = run_cli(work, "start", "lab-2", "--hosts", str(fleet.fleet_path))
        assert started.code == 0, started.stderr[-3000:]
        assert running("lab-2", pid)
    finally:
        sh("lab-2", f"kill -KILL {pid}; echo '{original}' > /data/rollout/supervisor.pid")
    assert_serving("lab-2")


def test_controller_killed_mid_batch_then_resumed(fleet: LabFleet, work: Path) -> None:
    run = start_slow_deploy(work, fleet, "resumed")
    run.wait_for(
        lambda e: (
            e["kind"] == "step_start" and e["step"] == "drain" and e["host"] in ("lab-2", "lab-3")
        )
    )
    run.process.send_signal(signal.SIGKILL)
    run.process.wait()
    run_id = run.events()[0]["run_id"]
    resumed = run_cli(work, "rollout", "--resume", run_id)
    assert resumed.code == 0, resumed.stderr[-3000:]
    skipped = resumed.host_end("lab-1")
    assert skipped["status"] == "validated" and "resumed" in skipped["reason"]
    assert set(serving_everywhere().values()) == {"resumed"}


def test_sigint_stops_new_hosts_and_the_run_resumes(fleet: LabFleet, work: Path) -> None:
    sh("lab-1", f"touch {POOL_HOLD}")  # the canary's drain cannot end before the Ctrl-C
    try:
        run = start_slow_deploy(work, fleet, "interrupted")
        run.wait_for(lambda e: e["kind"] == "step_start" and e["step"] == "drain")
        run.process.send_signal(signal.SIGINT)
        assert run.process.stderr is not None
        seen = ""
        while "interrupt: no new hosts will start" not in seen:  # the run has taken it
            line = run.process.stderr.readline()
            assert line, f"the run ended without taking the interrupt: {seen}"
            seen += line
    finally:
        sh("lab-1", f"rm -f {POOL_HOLD}")
    stopped = run.finish()
    assert stopped.code == 1
    assert "--resume" in seen + stopped.stderr
    versions = serving_everywhere()
    assert versions["lab-1"] == "interrupted" and versions["lab-2"] != "interrupted"
    resumed = run_cli(work, "rollout", "--resume", stopped.events[0]["run_id"])
    assert resumed.code == 0, resumed.stderr[-3000:]
    assert set(serving_everywhere().values()) == {"interrupted"}


def test_data_full_fails_preflight_before_any_stop(fleet: LabFleet, work: Path) -> None:
    lab.recreate_host("lab-3", data_size="64m")
    try:
        first = deploy(work, fleet, "small-disk", "--limit", "lab-3")
        assert first.code == 0, first.stderr[-3000:]
        pid = daemon_pid("lab-3")
        # The daemon writes its PCE file (26 MiB here) after the first PoRep of its life, in
        # the background and once its budget allows (CI saw it fill /data after the fill below,
        # and the run's own lock write fail): wait until it is saved, then fill.
        pce = "/data/zk/params/pce-porep-32g"
        poll("lab-3", f"[ -e {pce}.bin ] && [ ! -e {pce}.tmp ]")
        # All but 4 MiB: under preflight's margin (SPACE_MARGIN, 8 MiB) with room left for
        # what the busy host and the run's lock write meanwhile (with 256 KiB left, a CI run
        # saw the lock's own write fail). Read again and tried again where the host wrote to
        # /data between the df and the fallocate.
        left = SPACE_MARGIN // 2
        sh("lab-3", "for i in $(seq 20); do rm -f /data/filler; "
                    f"fallocate -l $(( $(df --output=avail -B1 /data | tail -1) - {left} )) "
                    "/data/filler && exit 0; sleep 0.1; done; exit 1")
        run = deploy(work, fleet, "no-room", "--limit", "lab-3")
        assert run.code == 1
        end = run.host_end("lab-3")
        assert end["status"] == "skipped" and "free" in end["reason"], end
        assert "stop" not in run.steps("lab-3")
        assert daemon_pid("lab-3") == pid
        assert assert_serving("lab-3") == "small-disk"
    finally:
        lab.recreate_host("lab-3")
        again = deploy(work, fleet, "after-full", "--limit", "lab-3")
        assert again.code == 0, again.stderr[-3000:]
