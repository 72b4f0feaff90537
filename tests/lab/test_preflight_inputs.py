"""Issue 17 on a lab host: a C1 made for another sector or miner is refused at preflight,
before the old daemon is stopped; the PCE rewrite needs its room even when the file exists;
a leftover `<pce>.tmp` is removed after the stop, before the start, never through a link."""

from __future__ import annotations

from pathlib import Path

import pytest

from .conftest import LabFleet
from .rollout_helpers import (
    FAST_KNOBS,
    CliRun,
    assert_serving,
    daemon_pid,
    fresh_fleet,
    rollout_args,
    run_cli,
    sh,
)

pytestmark = pytest.mark.lab
HOST = "lab-3"
TMP = "/data/zk/params/pce-porep-32g.tmp"


@pytest.fixture(scope="module")
def fleet(lab_fleet: LabFleet, tmp_path_factory: pytest.TempPathFactory) -> LabFleet:
    base = tmp_path_factory.mktemp("base")
    return fresh_fleet(lab_fleet, [HOST], lambda: deploy(base, lab_fleet, "inputs-base"))


def deploy(work: Path, fleet: LabFleet, version: str, *extra: str) -> CliRun:
    args = rollout_args(fleet.fleet_path, version)
    return run_cli(work, *args, "--limit", HOST, "--set", f"lab_knobs={FAST_KNOBS}", *extra)


def refused_at_preflight(run: CliRun) -> str:
    assert run.code == 1, run.stderr[-3000:]
    steps = run.steps(HOST)
    assert steps["preflight"]["status"] == "failed", steps
    assert "stop" not in steps and "drain" not in steps and "upload" not in steps
    return str(steps["preflight"]["reason"])


@pytest.mark.parametrize(("setting", "said"), [
    ("c1_sector_num=2", "it is the C1 of sector 1, but the validation command asks for sector 2"),
    ("c1_miner_id=1001", "its replica id is not that of miner 1001 and sector 1"),
])
def test_a_wrong_c1_sector_or_miner_is_refused_before_the_stop(
    fleet: LabFleet, tmp_path: Path, setting: str, said: str
) -> None:
    pid = daemon_pid(HOST)
    reason = refused_at_preflight(deploy(tmp_path, fleet, "wrong-c1", "--set", setting))
    assert said in reason, reason
    assert daemon_pid(HOST) == pid
    assert assert_serving(HOST) == "inputs-base"


def test_a_command_that_proves_another_kind_is_refused_at_load(
    fleet: LabFleet, tmp_path: Path
) -> None:
    """validate.proof_kind is the validation's kind; a cuzk-bench -t of another is a
    playbook error (exit 2, file:line: key), before any host is touched."""
    pid = daemon_pid(HOST)
    run = deploy(tmp_path, fleet, "other-kind", "--set", "proof_kind=wpost-32g")
    assert run.code == 2, run.stderr[-3000:]
    assert "lab.yaml:" in run.stderr and ": validate.command: the command proves cuzk-bench " \
        "-t porep, but validate.proof_kind is wpost-32g (-t wpost)" in run.stderr, run.stderr
    assert daemon_pid(HOST) == pid


def test_the_miner_comparison_turned_off_lets_the_proof_decide(
    fleet: LabFleet, tmp_path: Path
) -> None:
    """preflight.c1_miner false (the lab playbook's var c1_miner): the wrong miner passes
    preflight, noted; the stand-in's proof, checked against the request as cuzk's is, then
    fails the validation and the host goes back to the release it had."""
    run = deploy(tmp_path, fleet, "miner-off", "--set", "c1_miner=false",
                 "--set", "c1_miner_id=1001")
    assert run.code == 1, run.stderr[-3000:]
    steps = run.steps(HOST)
    assert steps["preflight"]["status"] != "failed", steps["preflight"]
    notes = " ".join(str(e.get("data")) + str(e.get("reason")) for e in run.events
                     if e.get("host") == HOST)
    assert "miner not compared (preflight.c1_miner false)" in notes
    assert steps["validate"]["status"] == "failed", steps["validate"]
    assert assert_serving(HOST) == "inputs-base"


def test_the_pce_rewrite_needs_its_room_though_the_file_exists(
    fleet: LabFleet, tmp_path: Path
) -> None:
    sh(HOST, "test -f /data/zk/params/pce-porep-32g.bin")  # the base's daemon wrote it
    pid = daemon_pid(HOST)
    reason = refused_at_preflight(deploy(tmp_path, fleet, "no-room", "--set",
                                         "pce_bytes=1000TiB"))
    assert "cuzk rewrites the PCE file through a .tmp in every lifetime" in reason, reason
    assert daemon_pid(HOST) == pid


def test_a_leftover_pce_temporary_is_removed_before_the_start(
    fleet: LabFleet, tmp_path: Path
) -> None:
    sh(HOST, f"head -c 3145728 /dev/zero > {TMP}")  # a write a stop cut short
    run = deploy(tmp_path, fleet, "tmp-left")
    assert run.code == 0, run.stderr[-3000:]
    config = run.steps(HOST)["config"]
    assert config["status"] == "changed" and f"removed a leftover {TMP}" in config["reason"]
    assert assert_serving(HOST) == "tmp-left"


def test_a_link_in_place_of_the_temporary_is_removed_not_followed(
    fleet: LabFleet, tmp_path: Path
) -> None:
    sh(HOST, f"echo keep > /root/precious && ln -sfn /root/precious {TMP}")
    run = deploy(tmp_path, fleet, "tmp-link")
    assert run.code == 0, run.stderr[-3000:]
    assert f"removed a leftover {TMP}" in run.steps(HOST)["config"]["reason"]
    assert sh(HOST, "cat /root/precious").strip() == "keep"
    sh(HOST, f"test ! -L {TMP} && rm -f /root/precious")
