"""The lab's C1 (rollout.lab.c1) and the stand-in daemon's check of it agree, and the
sidecar's settings are refused when they are not data of the right kind. No Docker."""

from __future__ import annotations

import base64
import json
import runpy
from pathlib import Path
from typing import Any

import pytest

from rollout.errors import UserError
from rollout.lab import c1
from rollout.lab.sidecar import _checked

REPO = Path(__file__).resolve().parents[2]
STANDIN = REPO / "src" / "rollout" / "resources" / "dockerfiles" / "lab-standin" / "cuzk-daemon"


@pytest.fixture(scope="module")
def daemon() -> dict[str, Any]:
    return runpy.run_path(str(STANDIN), run_name="standin")


def test_the_lab_c1_is_curios_wrapper_made_for_sector_1_and_miner_1000() -> None:
    shipped = json.loads((REPO / "playbooks" / "files" / "c1.json").read_text())
    assert set(shipped) == {"SectorNum", "Phase1Out", "SectorSize"}
    assert shipped["SectorNum"] == 1 and shipped["SectorSize"] == 32 << 30
    phase1 = json.loads(base64.b64decode(shipped["Phase1Out"]))
    expected = c1.replica_id(1000, 1, bytes(phase1["ticket"]), bytes(phase1["comm_d"]))
    assert bytes(phase1["replica_id"]) == expected
    assert json.loads(c1.c1_json(1, 1000)) == shipped


def test_prover_id_is_the_actor_id_as_leb128() -> None:
    assert c1.prover_id(1000)[:3] == bytes([0xE8, 0x07, 0])
    assert c1.prover_id(5)[:2] == bytes([5, 0])


@pytest.mark.parametrize("sector,miner", [(1, 1000), (7, 1000), (1, 1001), (2**40, 123456)])
def test_the_standin_derives_the_same_replica_id(
    daemon: dict[str, Any], sector: int, miner: int
) -> None:
    fields = daemon["parse_c1"](c1.c1_json(sector, miner))
    assert daemon["replica_id"](miner, sector, fields["ticket"], fields["comm_d"]) == \
        fields["replica_id"]
    assert daemon["replica_id"](miner + 1, sector, fields["ticket"], fields["comm_d"]) != \
        fields["replica_id"]


@pytest.mark.parametrize("data,message", [
    (b'{"c1": "lab"}', "failed to parse C1 output wrapper JSON"),
    (b"\xff\x00", "failed to parse C1 output wrapper JSON"),
    (b'{"SectorNum": 1, "Phase1Out": "%%%", "SectorSize": 1}', "failed to decode base64"),
    (json.dumps({"SectorNum": 1, "SectorSize": 1,
                 "Phase1Out": base64.b64encode(b"[]").decode()}).encode(),
     "failed to deserialize SealCommitPhase1Output"),
])  # fmt: skip
def test_a_c1_that_is_not_cuzks_is_refused_with_its_message(
    daemon: dict[str, Any], data: bytes, message: str
) -> None:
    with pytest.raises(ValueError, match=message):
        daemon["parse_c1"](data)


def test_scale_reads_a_number_or_a_fraction(daemon: dict[str, Any]) -> None:
    assert daemon["fraction"]("1/1024") == 1 / 1024
    assert daemon["fraction"](0.5) == 0.5
    for bad in ("0", "2", "-1/4", "x", "__import__('os')"):
        with pytest.raises(ValueError):
            daemon["fraction"](bad)


@pytest.mark.parametrize("settings", [
    {"launcher": "rm -rf /"}, {"hold_mib": "64"}, {"pause_secs": True}, {"addr": 9820},
])  # fmt: skip
def test_sidecar_settings_are_data_of_their_kind(settings: dict[str, Any]) -> None:
    with pytest.raises(UserError, match="sidecar setting"):
        _checked(settings)
    assert _checked({"hold_mib": 24, "pause_secs": 0.05, "c1": "/x"})["hold_mib"] == 24
