"""The budget floor from cuzk's whole memory model (issue 27), on lab hosts. The stand-in does
what cuzk does at a daemon's first proof (engine.rs, pipeline.rs insert_blocking): its PCE
extraction takes a transient reservation (14 MiB: cuzk's 14 GiB at the lab's 1/1024) and
holds it while it waits for the PCE's own bytes (26 MiB). With the porep SRS (44 MiB) a
64 MiB budget holds one proof (SRS + one 14 MiB partition = 58 MiB, the floor before issue
27), but once the extraction holds its 14 MiB no partition fits beside it: the stand-in's
proofs wait forever. rollout's preflight refuses that budget before anything is stopped,
naming every term (72 MiB = SRS + PCE extraction + one partition), and passes 80 MiB with
a warning: proofs run there, but the PCE (84 MiB = SRS + PCE extraction + PCE) never fits."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from rollout import lab
from rollout.lab.c1 import c1_json

from .conftest import LISTEN, LOG, ZK, LabFleet, Standin
from .rollout_helpers import (
    CliRun,
    assert_serving,
    daemon_pid,
    fresh_fleet,
    lab_playbook_text,
    rollout_args,
    run_cli,
    status_json,
)

pytestmark = pytest.mark.lab
MIB = 1 << 20
HOST = "lab-2"
C1 = f"{ZK}/c1.json"
PROVE = f"-a http://{LISTEN} single -t porep --c1 {C1}"
# No pool_mib: the SRS is the porep-32g figure at the lab's scale (44 MiB), kinds.yaml's.
KNOBS = "lab_knobs={load_secs: 0.3, drain_mib_per_sec: 256, prove_secs: 0.5}"
FLOOR = "72.0MiB (75497472 bytes) = SRS 44.0MiB + PCE extraction 14.0MiB + one partition 14.0MiB"
CACHED = "84.0MiB = SRS 44.0MiB + PCE extraction 14.0MiB + PCE 26.0MiB"


def wait_until(what: Any, bound: float = 60.0, step: float = 0.2) -> Any:
    end = time.monotonic() + bound
    while not (found := what()):
        assert time.monotonic() < end, "condition not met in time"
        time.sleep(step)
    return found


def test_the_old_floor_lets_the_pce_extraction_deadlock_the_standin(standin: Standin) -> None:
    """64 MiB: one proof's SRS and partition fit (58), but the extraction takes its 14 MiB
    and holds it while the PCE's 26 MiB never fit: no partition fits, the proofs wait."""
    standin.make_params()
    standin.put(C1, c1_json(1, 1000))
    standin.write_config({"pool_mib": None, "prove_secs": 0.5}, budget="64MiB")
    config = standin.ok(f"cat {ZK}/cuzk.toml")
    kept = [ln for ln in config.splitlines() if not ln.endswith("= null")]
    standin.put(f"{ZK}/cuzk.toml", ("\n".join(kept) + "\n").encode())
    standin.ok(f"cd {ZK} && nohup /data/bin/cuzk-daemon -c {ZK}/cuzk.toml > {LOG} 2>&1 "
               "< /dev/null &")
    standin.wait_ready()
    # proofs back to back: as cuzk, the stand-in starts the extraction before it queues the
    # first proof's partitions, so the extraction takes its 14 MiB first and no proof ends
    standin.ok("nohup sh -c 'for i in $(seq 3); do /data/bin/cuzk-bench "
               f"{PROVE} >> /tmp/floor.out 2>&1; done' < /dev/null > /dev/null 2>&1 &")

    def look() -> tuple[int, int, list[Any]] | None:
        """(used bytes, proofs completed, each unfinished job's partitions done), where no
        partition holds a reservation and no PCE is cached; None otherwise."""
        body = standin.status()[1] or {}
        waiting = [p for p in body.get("pipelines", [])
                   if p["partitions_done"] < p["total_partitions"]]
        moving = any(q["state"] not in ("pending", "done")
                     for p in waiting for q in p["partitions"])
        if not waiting or moving or body["allocations"]["pce"]:
            return None
        return (body["memory"]["used_bytes"], body["counters"]["total_completed"],
                [(p["job_id"], p["partitions_done"]) for p in waiting])

    def stuck() -> tuple[int, int, list[Any]] | None:
        first = look()
        time.sleep(2)  # two looks 2 s apart: a proof of 0.5 s would have moved
        return first if first is not None and look() == first else None

    used, done, _ = wait_until(stuck, bound=60)
    assert used == (44 + 14) * MIB and done == 0  # the SRS and the extraction's 14 MiB
    assert (standin.status()[1] or {})["memory"]["available_bytes"] == 6 * MIB
    assert "background PCE extraction starting" in standin.log()
    assert "PCE cached" not in standin.log()
    assert "=== Proof Result ===" not in standin.sh("cat /tmp/floor.out")[1]  # none ended


def playbook_with_budget(work: Path, size: str) -> Path:
    text = lab_playbook_text().replace("  total_budget: cgroup ", f"  total_budget: {size} ", 1)
    assert size in text
    path = work / f"budget-{size}.yaml"
    path.write_text(text)
    return path


def deploy(work: Path, fleet: LabFleet, version: str, budget: str | None = None) -> CliRun:
    playbook = ("--playbook", str(playbook_with_budget(work, budget))) if budget else ()
    return run_cli(work, *rollout_args(fleet.fleet_path, version), *playbook, "--set", KNOBS,
                   "--limit", HOST)


def test_preflight_refuses_that_budget_before_anything_is_stopped_and_warns_under_the_pce(
    lab_fleet: LabFleet, tmp_path: Path
) -> None:
    fresh_fleet(lab_fleet, [HOST])
    lab.set_sidecar(HOST, None)  # proofs of its own only: the figures below are exact
    try:
        first = deploy(tmp_path, lab_fleet, "floor-1")
        assert first.code == 0, first.stderr[-3000:]
        pid = daemon_pid(HOST)

        refused = deploy(tmp_path, lab_fleet, "floor-2", "64MiB")
        assert refused.code == 1, refused.stderr[-3000:]
        end = refused.host_end(HOST)
        assert end["status"] == "skipped" and "host untouched" in end["reason"], end
        steps = refused.steps(HOST)
        assert steps["preflight"]["status"] == "failed" and "stop" not in steps, steps
        reason = steps["preflight"]["reason"]
        assert ("memory budget 64.0MiB (67108864 bytes) is too small for a lab-porep daemon "
                "once its first proof's PCE extraction holds its 14.0MiB, which needs "
                + FLOOR) in reason, reason
        assert f"give the daemon 72.0MiB at least, {CACHED} to cache its PCE" in reason
        assert daemon_pid(HOST) == pid and assert_serving(HOST) == "floor-1"

        warned = deploy(tmp_path, lab_fleet, "floor-3", "80MiB")
        assert warned.code == 0, warned.stderr[-3000:]
        assert warned.host_end(HOST)["status"] == "validated"
        [warning] = [e for e in warned.events if e["kind"] == "warning" and e["host"] == HOST]
        assert warning["reason"].startswith("WARNING: memory budget 80.0MiB (83886080 bytes): "
                                            "cuzk proves lab-porep without its PCE"), warning
        assert "under 84.0MiB (88080384 bytes) = SRS 44.0MiB + PCE extraction 14.0MiB + PCE " \
               "26.0MiB" in warning["reason"]
        assert warning["reason"] in warned.steps(HOST)["preflight"]["reason"]
        # as cuzk: the proof ran beside the extraction's 14 MiB, the PCE never came
        doc = status_json(HOST)
        assert doc["memory"]["total_bytes"] == 80 * MIB and doc["allocations"]["pce"] == []
        assert doc["memory"]["used_bytes"] == (44 + 14) * MIB, doc["memory"]
    finally:
        lab.set_sidecar(HOST, lab.BUSY_SIDECAR)
