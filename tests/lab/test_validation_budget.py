"""A validation whose proof the daemon's budget cannot hold fails at once, naming that
cause and the figures, not at validate.timeout (issue 17), on a real lab host: the lab's
daemon has a budget of some hundred MiB, one porep-32g proof needs its SRS + a partition."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from .conftest import LabFleet
from .rollout_helpers import (
    assert_serving,
    daemon_pid,
    fresh_fleet,
    inventory_with,
    rollout_args,
    run_cli,
)

pytestmark = pytest.mark.lab
FAST = ("--set", "lab_knobs={pool_mib: 32, load_secs: 0.3, drain_mib_per_sec: 256, "
        "prove_secs: 0.1}", "--set", "ready_timeout=15")


def test_a_budget_below_one_proof_fails_the_validation_at_once_naming_it(
    lab_fleet: LabFleet, tmp_path: Path
) -> None:
    fresh_fleet(lab_fleet, ["lab-1"])
    first = run_cli(tmp_path, *rollout_args(lab_fleet.fleet_path, "b1"), *FAST,
                    "--limit", "lab-1")
    assert first.code == 0, first.stderr[-3000:]
    pid = daemon_pid("lab-1")

    began = time.monotonic()
    kind = inventory_with(tmp_path, lab_fleet.fleet_path, "lab-1",
                          'proof_kind: "porep-32g", validate_timeout: 300')
    checked = run_cli(tmp_path, "validate", "lab-1", "--hosts", str(kind))
    took = time.monotonic() - began
    said = checked.stdout + checked.stderr
    assert checked.code == 1, said[-3000:]
    assert "cannot hold one porep-32g proof" in said, said[-3000:]
    assert "cuzk would wait forever" in said
    assert "validation cannot run: the daemon's budget " in said
    assert "MiB (" in said and "needs 58.0GiB" in said, said[-3000:]  # both figures
    assert took < 60, took  # at once, not at the 300 s timeout
    assert daemon_pid("lab-1") == pid and assert_serving("lab-1") == "b1"
