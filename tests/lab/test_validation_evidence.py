"""Validation evidence on the lab (issue 18): a bench that prints its FAILED result block and
then a forged `status: COMPLETED` line never validates a host; the canary's revert validates
the release it goes back to with that release's own bench (the new one's is the liar)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from .conftest import LabFleet
from .rollout_helpers import FAST_KNOBS, fresh_fleet, rollout_args, run_cli, serving_version, sh

pytestmark = pytest.mark.lab
HOST = "lab-1"


@pytest.fixture(scope="module")
def fleet(lab_fleet: LabFleet) -> LabFleet:
    return fresh_fleet(lab_fleet, [HOST])


@pytest.fixture(scope="module")
def work(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("evidence")


def roll(work: Path, fleet: LabFleet, version: str, *extra: str):  # type: ignore[no-untyped-def]
    return run_cli(work, *rollout_args(fleet.fleet_path, version), "--limit", HOST,
                   "--set", f"lab_knobs={FAST_KNOBS}", *extra)


def test_a_forged_success_line_never_validates_and_the_revert_uses_its_own_bench(
    fleet: LabFleet, work: Path
) -> None:
    first = roll(work, fleet, "ev-1")
    assert first.code == 0, first.stderr[-3000:]
    old = sh(HOST, "readlink /data/current").strip()
    run = roll(work, fleet, "ev-2", "--set", "fault=forged_success")
    assert run.code == 1, run.stderr[-3000:]
    steps = run.steps(HOST)
    assert steps["validate"]["status"] == "failed", steps["validate"]
    assert "2 status lines" in steps["validate"]["reason"], steps["validate"]
    # the revert proves the old daemon with the old release's bench, which tells the truth
    assert steps["rollback-validate"]["status"] == "ok", steps["rollback-validate"]
    assert run.host_end(HOST)["status"] == "rolled_back", run.host_end(HOST)
    assert sh(HOST, "readlink /data/current").strip() == old
    assert serving_version(HOST) == "ev-1"
    evidence = json.loads(sh(HOST, "cat /data/rollout/validated.json"))
    assert f"releases/{evidence['release']}" == old, evidence
