"""Single steps and rollback say what is true (issue 19), on real lab hosts: `rollback --to R`
leaves a host already on R as it is and exits 0 when every host ends on R; `validate` on a
stopped host says nothing answered, and fails."""

from __future__ import annotations

from pathlib import Path

import pytest

from .conftest import LabFleet
from .rollout_helpers import (
    assert_serving,
    daemon_pid,
    fresh_fleet,
    read_events,
    rollout_args,
    run_cli,
    sh,
)

pytestmark = pytest.mark.lab
FAST = ("--set", "lab_knobs={pool_mib: 32, load_secs: 0.3, drain_mib_per_sec: 256, "
        "prove_secs: 0.1}", "--set", "ready_timeout=15")
HOSTS = ["lab-1", "lab-2", "lab-3"]


def _current(host: str) -> str:
    return sh(host, "readlink /data/current").strip().rsplit("/", 1)[-1]


def test_rollback_to_a_release_some_hosts_already_run(
    lab_fleet: LabFleet, tmp_path: Path
) -> None:
    fresh_fleet(lab_fleet, HOSTS)
    fleet = str(lab_fleet.fleet_path)
    first = run_cli(tmp_path, *rollout_args(lab_fleet.fleet_path, "r1"), *FAST)
    assert first.code == 0, first.stderr[-3000:]
    r1 = _current("lab-1")
    second = run_cli(tmp_path, *rollout_args(lab_fleet.fleet_path, "r2"), *FAST)
    assert second.code == 0, second.stderr[-3000:]
    one = run_cli(tmp_path, "rollback", "--hosts", fleet, "--to", r1, "--limit", "lab-1")
    assert one.code == 0, one.stdout[-3000:] + one.stderr[-3000:]
    assert _current("lab-1") == r1 and _current("lab-2") != r1
    pid = daemon_pid("lab-1")

    events = tmp_path / "all.jsonl"
    back = run_cli(tmp_path, "rollback", "--hosts", fleet, "--to", r1, "--json", str(events))
    assert back.code == 0, back.stdout[-3000:] + back.stderr[-3000:]
    assert "no earlier release" not in back.stdout + back.stderr
    assert {h: assert_serving(h) for h in HOSTS} == dict.fromkeys(HOSTS, "r1")
    assert daemon_pid("lab-1") == pid  # left as it was: not stopped, not restarted
    seen = read_events(events)
    notes = [e["reason"] for e in seen if e["kind"] == "note" and e.get("host") == "lab-1"]
    assert f"already on release {r1}: left as it is" in notes
    steps = {e["step"]: e["status"] for e in seen
             if e["kind"] == "step_end" and e.get("host") == "lab-1"}  # fmt: skip
    assert {steps[k] for k in ("stop", "drain", "switch", "start")} == {"skipped"}
    ends = {e["host"]: e["status"] for e in seen if e["kind"] == "host_end"}
    assert ends == dict.fromkeys(HOSTS, "validated")


def test_validate_on_a_stopped_host_says_nothing_answered(
    lab_fleet: LabFleet, tmp_path: Path
) -> None:
    fleet = str(lab_fleet.fleet_path)
    fresh_fleet(lab_fleet, ["lab-2"])
    base = run_cli(tmp_path, *rollout_args(lab_fleet.fleet_path, "v1"), "--limit", "lab-2",
                   *FAST)  # fmt: skip
    assert base.code == 0, base.stderr[-3000:]
    stopped = run_cli(tmp_path, "stop", "lab-2", "--hosts", fleet)
    assert stopped.code == 0, stopped.stdout[-3000:] + stopped.stderr[-3000:]
    checked = run_cli(tmp_path, "validate", "lab-2", "--hosts", fleet)
    said = checked.stdout + checked.stderr
    assert checked.code == 1, said[-3000:]
    assert "nothing answered on port 9821: the daemon is not running" in said, said[-3000:]
    assert "answered, but" not in said
    started = run_cli(tmp_path, "start", "lab-2", "--hosts", fleet)
    assert started.code == 0, started.stdout[-3000:] + started.stderr[-3000:]
    assert assert_serving("lab-2") == "v1"
