"""A validation whose proof's job waits for the daemon's budget (visible in /status: its
partitions pending, the free budget below one partition) while another job holds it fails
after validate.budget_wait, naming that cause and the figures, not at validate.timeout
(issue 17). On a real lab host: the daemon's budget is 256 MiB, its SRS 236 MiB, so one
partition (14 MiB, the stand-in's scale) fits only while no other job holds one."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from rollout import lab

from .conftest import LabFleet
from .rollout_helpers import (
    daemon_pid,
    fresh_fleet,
    inventory_with,
    lab_playbook_text,
    rollout_args,
    run_cli,
    sh,
    status_json,
)

pytestmark = pytest.mark.lab
HOST = "lab-1"
MIB = 1 << 20
# A proof takes 10 s (1 s a partition); the SRS leaves 20 MiB of the 256 MiB budget: room
# for one partition at a time. No PCE, so that nothing else is reserved.
KNOBS = ("lab_knobs={pool_mib: 236, pce_mib: 0, load_secs: 0.3, drain_mib_per_sec: 256, "
         "prove_secs: 10}")


def playbook_with_a_budget(work: Path) -> Path:
    """The lab playbook, usable from another folder, with a fixed budget of 256 MiB and
    validate.budget_wait of 1 s."""
    text = lab_playbook_text().replace("  total_budget: cgroup ", "  total_budget: 256MiB ", 1)
    marker = '  timeout: "{{ validate_timeout }}"'
    assert marker in text and "256MiB" in text
    text = text.replace(marker, "  budget_wait: 1\n" + marker, 1)
    path = work / "budget-256.yaml"
    path.write_text(text)
    return path


def curio_holding_a_partition(deadline: float = 30) -> dict[str, Any]:
    """/status once a curio job holds a partition (the sidecar's first proof runs)."""
    end = time.monotonic() + deadline
    while time.monotonic() < end:
        doc = status_json(HOST)
        for job in doc.get("pipelines", []):
            states = {p["state"] for p in job["partitions"]}
            if job["job_id"].startswith("curio-") and states & {"synthesizing", "gpu"}:
                return doc
        time.sleep(0.1)
    raise AssertionError(f"no curio job holds a partition on {HOST}: {status_json(HOST)}")


def test_a_proof_waiting_for_budget_held_by_another_job_fails_after_budget_wait(
    lab_fleet: LabFleet, tmp_path: Path
) -> None:
    fresh_fleet(lab_fleet, [HOST])
    lab.set_sidecar(HOST, None)  # a quiet host while it is deployed
    try:
        playbook = playbook_with_a_budget(tmp_path)
        first = run_cli(tmp_path, *rollout_args(lab_fleet.fleet_path, "b1"), "--playbook",
                        str(playbook), "--set", KNOBS, "--limit", HOST)
        assert first.code == 0, first.stderr[-3000:]
        pid = daemon_pid(HOST)
        assert status_json(HOST)["memory"]["total_bytes"] == 256 * MIB

        # curio's proofs: the first holds a partition (and so the budget), the second waits
        lab.set_sidecar(HOST, {"pause_secs": 0.2, "concurrency": 2})
        held = curio_holding_a_partition()
        assert held["memory"]["available_bytes"] < 14 * MIB, held["memory"]

        inventory = inventory_with(tmp_path, lab_fleet.fleet_path, HOST, "validate_timeout: 300")
        began = time.monotonic()
        checked = run_cli(tmp_path, "validate", HOST, "--hosts", str(inventory), "--playbook",
                          str(playbook))
        took = time.monotonic() - began
    finally:
        lab.set_sidecar(HOST, lab.BUSY_SIDECAR)
    said = checked.stdout + checked.stderr
    assert checked.code == 1, said[-3000:]
    assert took < 60, took  # budget_wait (1 s), not validate.timeout (300 s)
    assert "with other work holding the budget" in said, said[-3000:]
    assert "waits for cuzk's memory budget (10 partitions pending)" in said
    assert f"The budget 256.0MiB ({256 * MIB} bytes) has " in said
    assert f"one lab-porep partition needs 14.0MiB ({14 * MIB} bytes)" in said
    assert "SRS and PCE 236.0MiB" in said and "the jobs in flight: porep-c2 curio-" in said
    assert "cordon the host (work.cordon) or let its work finish" in said
    # the proof was stopped with its children; the daemon serves on as it was
    assert "cuzk-bench" not in sh(HOST, "ps -eo args | grep '[c]uzk-bench' || true")
    assert daemon_pid(HOST) == pid
    assert sh(HOST, "readlink /data/current").strip().startswith("releases/")
    assert status_json(HOST)["memory"]["total_bytes"] == 256 * MIB
