"""The preload step on a real lab host: after ready, the new daemon loads the SRS through
the release's own cuzk-bench (cuzk's PreloadSRS), so the validation's proof loads nothing;
the dry run lists the call, and a second rollout of the same release skips it on the
evidence of validation."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from .conftest import LabFleet
from .rollout_helpers import fresh_fleet, lab_playbook_text, rollout_args, run_cli, sh

pytestmark = pytest.mark.lab
HOST = "lab-1"
READY = "  - {name: ready, kind: ready, timeout: 90}\n"


def playbook_with_preload(work: Path) -> Path:
    text = lab_playbook_text()
    assert READY in text
    path = work / "preload.yaml"
    path.write_text(text.replace(READY, READY + "  - {name: preload, kind: preload}\n", 1))
    return path


def test_preload_loads_the_srs_before_the_validation(lab_fleet: LabFleet, tmp_path: Path
                                                     ) -> None:
    fresh_fleet(lab_fleet, [HOST])
    play = str(playbook_with_preload(tmp_path))
    args = (*rollout_args(lab_fleet.fleet_path, "p1"), "--playbook", play, "--limit", HOST)
    dry = run_cli(tmp_path, *args, "--dry-run")
    assert dry.code == 0, dry.stderr[-3000:]
    assert "preload (preload) would run: load the SRS of porep-32g" in dry.stdout, dry.stdout
    assert re.search(r"preload\(command=\['/data/(current|releases/[0-9a-f]{12})/cuzk-bench', '-a'",
                     dry.stdout), dry.stdout  # the build to come, or one made before
    assert "circuit='porep-32g'" in dry.stdout

    run = run_cli(tmp_path, *args)
    assert run.code == 0, run.stderr[-3000:]
    preload = run.steps(HOST)["preload"]
    assert preload["status"] == "changed", preload
    assert re.fullmatch(r"SRS loaded: porep-32g in \d+ ms", preload["reason"]), preload
    log = sh(HOST, "cat /data/rollout/daemon.log")
    asked = log.rfind("PreloadSRS circuit_id=porep-32g")
    assert asked >= 0, log[-3000:]
    assert log[asked:].count("loading SRS from disk") == 1  # by the preload; not by the proof

    again = run_cli(tmp_path, *args)
    assert again.code == 0, again.stderr[-3000:]
    assert again.steps(HOST)["preload"]["status"] == "skipped"
    assert "already passed the validation" in again.steps(HOST)["preload"]["reason"]
