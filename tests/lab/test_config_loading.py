"""Issue 19 on real hosts: `--adopt` is a setting (it works with a playbook that never
mentions adopt), and the commands that only look at or act on hosts need no build context
(no curio checkout, the built-in real playbook as the default)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from .conftest import LabFleet
from .rollout_helpers import (
    assert_serving,
    inventory_with,
    lab_playbook_text,
    reset_host,
    rollout_args,
    run_cli,
    sh,
)
from .test_ownership import FAST, HOST, KNOBS, cuzk_pids, hand_started

pytestmark = pytest.mark.lab


@pytest.fixture(scope="module")
def fleet(lab_fleet: LabFleet, tmp_path_factory: pytest.TempPathFactory) -> LabFleet:
    reset_host(HOST)
    work = tmp_path_factory.mktemp("base")
    first = run_cli(work, *rollout_args(lab_fleet.fleet_path, "base"), *FAST,
                    "--set", f"lab_knobs={{{KNOBS}}}")
    assert first.code == 0, first.stderr[-3000:]
    return lab_fleet


def playbook_without_adopt(work: Path) -> Path:
    """The lab playbook, usable from another folder, with every mention of adopt gone."""
    text = "\n".join(line for line in lab_playbook_text().splitlines() if "adopt" not in line)
    text += "\n"
    path = work / "no-adopt.yaml"
    path.write_text(text)
    return path


def test_adopt_flag_adopts_with_a_playbook_that_never_mentions_adopt(
    fleet: LabFleet, tmp_path: Path
) -> None:
    playbook = playbook_without_adopt(tmp_path)
    hand = hand_started(HOST)
    run = run_cli(tmp_path, *rollout_args(fleet.fleet_path, "adopted-own"), "--playbook",
                  str(playbook), *FAST, "--set", f"lab_knobs={{{KNOBS}}}", "--adopt")
    assert "no template uses" not in run.stderr, run.stderr[-2000:]
    end = run.host_end(HOST)
    assert run.code == 0 and end["status"] == "validated", (end, run.stderr[-2000:])
    assert f"adopted and stopped daemon(s) {hand}" in run.steps(HOST)["stop"]["reason"]
    assert assert_serving(HOST) == "adopted-own"
    assert hand not in cuzk_pids(HOST)
    exits = [json.loads(x) for x in sh(HOST, "cat /data/rollout/exits.jsonl").splitlines()]
    assert any(e.get("adopted") and e["pid"] == hand for e in exits), exits


def own_inventory(work: Path, fleet: LabFleet) -> Path:
    """The lab inventory as a user's own: it names no playbook (so the default is the
    built-in real one), usable from a folder with no playbooks/ in it."""
    path = inventory_with(work, fleet.fleet_path, HOST, "job: own")
    text = "\n".join(line for line in path.read_text().splitlines()
                     if not line.startswith("playbook:"))
    path.write_text(text + "\n")
    return path


def test_looking_needs_no_build_context(fleet: LabFleet, tmp_path: Path) -> None:
    work = tmp_path / "cwd"
    work.mkdir()  # no playbooks/ here, and no ~/curio on this controller
    assert not (Path.home() / "curio").exists()
    inventory = str(own_inventory(tmp_path, fleet))
    env = {"HOME": str(tmp_path / "home")}
    status = run_cli(tmp_path, "status", "--hosts", inventory, "--json", env=env, cwd=work)
    assert status.code == 0, status.stderr[-2000:]
    said = [line for line in status.stderr.splitlines()  # the paths used, and how to choose
            if not line.startswith(("playbook: ", "warning: no playbook is named"))]
    assert not [line for line in said if "build" in line or "curio" in line], status.stderr
    rows = json.loads(status.stdout)
    assert {h["host"] for h in rows["hosts"]} == {h.name for h in fleet.hosts}, rows
    diagnose = run_cli(tmp_path, "diagnose", HOST, "--hosts", inventory, env=env, cwd=work)
    assert diagnose.code in (0, 1) and HOST in diagnose.stdout, diagnose.stderr[-2000:]
    assert "build.context" not in diagnose.stderr, diagnose.stderr
    heal = run_cli(tmp_path, "heal", "--hosts", inventory, "--limit", HOST, env=env, cwd=work)
    assert heal.code == 0, (heal.stdout[-2000:], heal.stderr[-2000:])
    drain = run_cli(tmp_path, "drain", HOST, "--hosts", inventory, env=env, cwd=work)
    assert drain.code == 0, (drain.stdout[-2000:], drain.stderr[-2000:])
    assert cuzk_pids(HOST) == []
    start = run_cli(tmp_path, "start", HOST, "--hosts", inventory, env=env, cwd=work)
    assert start.code == 0, (start.stdout[-2000:], start.stderr[-2000:])
    assert assert_serving(HOST)
