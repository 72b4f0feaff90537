"""One hostile vast.ai row fails only its host: the local stand-in of the API lists the lab
hosts and one instance whose gpu_name holds an escape sequence; that instance is refused
with its reason (escaped) and ends failed, never contacted, and the rest of the fleet is
rolled (exit 1: one host did not end validated)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from .conftest import LabFleet
from .rollout_helpers import FAST_KNOBS, assert_serving, reset_host, run_cli
from .test_vastai_inventory import KEY, instance, serve_api, vast_fleet_yaml

pytestmark = pytest.mark.lab
pytest.importorskip("vastai")
HOSTILE_ID = 41000077


@pytest.fixture
def hostile_api(lab_fleet: LabFleet) -> Iterator[str]:
    """A local API listing the lab hosts and, between them, one hostile row."""
    rows = [instance(i, h.name, h.port) for i, h in enumerate(lab_fleet.hosts)]
    hostile = instance(77, "lab-hostile", lab_fleet.hosts[0].port)
    hostile["gpu_name"] = "RTX\x1b]0;owned\x07\x1b[2J 4090"
    rows.insert(1, hostile)
    with serve_api(rows) as (url, _):
        yield url


def test_one_hostile_row_leaves_the_rest_of_the_fleet_rolled(
        lab_fleet: LabFleet, tmp_path: Path, hostile_api: str) -> None:
    env = {"VAST_URL": hostile_api, "VAST_API_KEY": KEY}
    names = [h.name for h in lab_fleet.hosts]
    for name in names:
        reset_host(name)
    run = run_cli(tmp_path, "rollout", "--hosts",
                  str(vast_fleet_yaml(lab_fleet, tmp_path, "proxy")),
                  "--set", "version=vast-hostile", "--set", f"lab_knobs={FAST_KNOBS}", env=env)
    assert run.code == 1, run.stderr[-3000:]  # one host did not end validated: its own
    why = (f"vast.ai instance {HOSTILE_ID}: its row does not validate "
           "(gpu_name: holds a control character)")
    assert f"error: lab-hostile is refused, the other hosts go on: {why}" in run.stderr
    assert "\x1b" not in run.stdout + run.stderr and "\x07" not in run.stdout + run.stderr
    ends = {e["host"] for e in run.events if e["kind"] == "host_end"}
    assert sorted(ends) == sorted([*names, "lab-hostile"])
    assert run.host_end("lab-hostile")["status"] == "failed"
    assert run.host_end("lab-hostile")["reason"] == why
    for name in names:
        assert run.host_end(name)["status"] == "validated"
        assert assert_serving(name) == "vast-hostile"
