"""The floor `inv bench` compares rollout against must really do the work: one scp and one
ssh per host leave each host serving the new release, validated; a release whose proofs
fail makes the floor fail, so a floor that skipped validation could not pass here."""

from __future__ import annotations

from pathlib import Path

import pytest

from rollout.bench.bundles import padded_bundle
from rollout.bench.floor import run_floor
from rollout.bench.side_by_side import lab_hosts
from rollout.bundle.local import open_bundle
from rollout.config.playbook import LAB_PLAYBOOK
from rollout.errors import StepFailed

from .conftest import LabFleet
from .rollout_helpers import FAST_KNOBS, assert_serving, daemon_pid, reset_host, run_cli, sh

pytestmark = pytest.mark.lab
HOSTS = ("lab-1", "lab-2")


def _build(work: Path, version: str, *sets: str) -> Path:
    out = work / f"bundle-{version}"
    args = ("build", "--out", str(out), "--playbook", str(LAB_PLAYBOOK),
            "--set", f"version={version}")
    run = run_cli(work, *args, *(a for s in sets for a in ("--set", s)))
    assert run.code == 0, run.stderr[-3000:]
    return out


def test_floor_deploys_and_validates_and_fails_when_the_proof_fails(
    lab_fleet: LabFleet, tmp_path: Path
) -> None:
    for host in HOSTS:
        reset_host(host)
    first = _build(tmp_path, "floor-1")
    primed = run_cli(tmp_path, "rollout", "--hosts", str(lab_fleet.fleet_path), "--release",
                     str(first), "--set", f"lab_knobs={FAST_KNOBS}", "--limit", ",".join(HOSTS))
    assert primed.code == 0, primed.stderr[-3000:]
    before = {h: daemon_pid(h) for h in HOSTS}
    hosts = [h for h in lab_hosts() if h.name in HOSTS]

    fresh = open_bundle(padded_bundle(first, tmp_path / "floor-2", 0, 4096))
    run_floor(hosts, fresh, tmp_path)
    for host in HOSTS:
        assert sh(host, "readlink /data/current").strip() == f"releases/{fresh.id}"
        assert daemon_pid(host) not in (None, before[host]), f"{host}: daemon not restarted"
        assert_serving(host)

    failing = open_bundle(_build(tmp_path, "floor-bad", "fault=fail_validation"))
    with pytest.raises(StepFailed, match="validation"):
        run_floor(hosts[:1], failing, tmp_path)
    for host in HOSTS:
        reset_host(host)
