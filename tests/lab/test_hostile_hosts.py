"""Each host's answers are hostile data, and one machine is one entry (issue 18), on the lab.

A lab host whose answers rollout cannot take (its python3 rewrites the agent's answers so a
field has the wrong type; or a 20 MiB supervisor.json that facts read and send back) fails
alone with a clear reason, the others end validated, the run exits 1 (never 70), and
`rollout status` shows that host as unknown. Two inventory entries that reach the same lab
host (same port, two names) are both refused before anything changes there."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from .conftest import LabFleet
from .rollout_helpers import (
    FAST_KNOBS,
    CliRun,
    daemon_pid,
    fresh_fleet,
    rollout_args,
    run_cli,
    sh,
)

pytestmark = pytest.mark.lab
HOSTS = ["lab-1", "lab-2", "lab-3"]
BAD = "lab-3"  # not the canary (lab-1): the batch after it has a good host beside it
WRAPPER = "/usr/local/bin/python3"  # before /usr/bin on an SSH session's PATH
# The host's python3 lies: every answer of the agent says "exit": "zero" for 0.
LYING_PYTHON = """#!/bin/sh
/usr/bin/python3 "$@" | sed -u 's/"exit": 0,/"exit": "zero",/'
"""
HOSTILE = {
    "malformed": (f"cat > {WRAPPER} <<'EOF'\n{LYING_PYTHON}EOF\nchmod 755 {WRAPPER}",
                  f"rm -f {WRAPPER}", "is malformed: exit is str 'zero'"),
    "oversized": ("mkdir -p /data/rollout && python3 -c 'import json; open(\"/data/rollout/"
                  "supervisor.json\", \"w\").write(json.dumps({\"state\": \"x\" * (20 << 20)}))'",
                  "rm -f /data/rollout/supervisor.json", "over the 16 MiB cap"),
}


@pytest.fixture(scope="module")
def fleet(lab_fleet: LabFleet) -> LabFleet:
    return fresh_fleet(lab_fleet, HOSTS)


def deploy(work: Path, inventory: Path, version: str) -> CliRun:
    return run_cli(work, *rollout_args(inventory, version), "--set", f"lab_knobs={FAST_KNOBS}")


def status(work: Path, inventory: Path) -> tuple[CliRun, dict[str, dict[str, object]]]:
    run = run_cli(work, "status", "--hosts", str(inventory), "--json")
    doc = json.loads(run.stdout) if run.stdout.strip().startswith("{") else {"hosts": []}
    return run, {str(row["host"]): row for row in doc["hosts"]}


@pytest.fixture
def hostile(request: pytest.FixtureRequest, fleet: LabFleet) -> Iterator[str]:
    plant, remove, _ = HOSTILE[request.param]
    sh(BAD, plant)
    try:
        yield request.param
    finally:
        sh(BAD, remove)


@pytest.mark.parametrize("hostile", sorted(HOSTILE), indirect=True)
def test_one_hostile_host_fails_alone(hostile: str, fleet: LabFleet, tmp_path: Path) -> None:
    run = deploy(tmp_path, fleet.fleet_path, f"hostile-{hostile}")
    assert run.code == 1, run.stderr[-3000:]
    assert "Traceback" not in run.stderr and "internal error" not in run.stderr
    bad = run.host_end(BAD)
    assert bad["status"] in ("failed", "unreachable"), bad
    assert HOSTILE[hostile][2] in bad["reason"], bad["reason"]
    for good in ("lab-1", "lab-2"):
        assert run.host_end(good)["status"] == "validated", run.host_end(good)
    assert "lock" not in sh(BAD, "ls -A /data/rollout").split(), "its lock was left behind"
    seen, rows = status(tmp_path, fleet.fleet_path)
    assert seen.code not in (70, 2), seen.stderr[-2000:]
    assert rows[BAD]["state"] == "unknown", rows[BAD]
    assert HOSTILE[hostile][2] in str(rows[BAD]["error"]) or "MiB" in str(rows[BAD]["error"])
    assert {rows[h]["state"] for h in ("lab-1", "lab-2")} == {"running"}


def twice(work: Path, fleet_path: Path, host: str, again: str) -> Path:
    """The lab inventory with `host` listed a second time, as `again` (same address, port)."""
    lab_dir = fleet_path.parent
    text = fleet_path.read_text().replace("key_file: keys/", f"key_file: {lab_dir}/keys/")
    text = text.replace("known_hosts: known_hosts", f"known_hosts: {lab_dir}/known_hosts")
    lines = text.splitlines()
    start = lines.index(f"  - name: {host}")
    block = [lines[start]] + [ln for ln in lines[start + 1:start + 5] if ln.startswith("    ")]
    copy = [f"  - name: {again}", *block[1:]]
    path = work / "fleet-twice.yaml"
    path.write_text("\n".join([*lines, *copy]) + "\n")
    return path


def test_one_machine_under_two_names_is_refused_before_any_change(
    fleet: LabFleet, tmp_path: Path
) -> None:
    sh("lab-2", "rm -rf /data/*")  # an empty rented host: nothing there to change
    inventory = twice(tmp_path, fleet.fleet_path, "lab-2", "lab-2-again")
    run = deploy(tmp_path, inventory, "one-machine")
    assert run.code == 1, run.stderr[-3000:]
    for name, other in (("lab-2", "lab-2-again"), ("lab-2-again", "lab-2")):
        end = run.host_end(name)
        assert end["status"] == "failed", end
        assert f"the same machine as inventory entry {other}" in end["reason"], end["reason"]
        assert not run.steps(name, "step_start"), f"{name}: a step ran"
    for good in ("lab-1", "lab-3"):
        assert run.host_end(good)["status"] == "validated", run.host_end(good)
    left = sh("lab-2", "ls -A /data /data/rollout")
    assert "releases" not in left and "current" not in left and "daemon.pid" not in left, left
    assert "lock\n" not in left + "\n", left  # its lock was given back
    assert "lock" not in sh("lab-2", "ls -A /data/rollout").split(), "a lock stays"
    seen = run_cli(tmp_path, "status", "--hosts", str(inventory))
    assert seen.code != 70, seen.stderr[-2000:]
    assert "lab-2  same machine as lab-2-again" in seen.stdout, seen.stdout


def test_two_machines_with_one_host_id_keep_no_lock(fleet: LabFleet, tmp_path: Path) -> None:
    """lab-3's host id copied onto lab-2 (a cloned disk): two machines, one id. Both are
    refused, and neither keeps a lock once the run is over (issue 28)."""
    cloned = sh("lab-3", "cat /data/rollout/host-id").strip()
    original = sh("lab-2", "cat /data/rollout/host-id 2>/dev/null; true").strip()
    sh("lab-2", f"mkdir -p /data/rollout && echo {cloned} > /data/rollout/host-id")
    try:
        run = deploy(tmp_path, fleet.fleet_path, "cloned-id")
        assert run.code == 1, run.stderr[-3000:]
        for name in ("lab-2", "lab-3"):
            assert "the same machine as inventory entry" in run.host_end(name)["reason"]
            assert not run.steps(name, "step_start"), f"{name}: a step ran"
            assert "lock" not in sh(name, "ls -A /data/rollout").split(), f"{name}: a lock stays"
        assert run.host_end("lab-1")["status"] == "validated", run.host_end("lab-1")
    finally:
        restore = f"echo {original} >" if original else "rm -f"
        sh("lab-2", f"{restore} /data/rollout/host-id")


def test_a_single_step_whose_lock_cannot_be_taken_does_nothing(
    fleet: LabFleet, tmp_path: Path
) -> None:
    """The host's lock script fails (a folder where its guard file goes): `rollout stop`
    stops nothing and exits 1, naming why; the daemon runs on."""
    served = run_cli(tmp_path, *rollout_args(fleet.fleet_path, "single-locked"), "--limit",
                     "lab-1", "--set", f"lab_knobs={FAST_KNOBS}")
    assert served.code == 0, served.stderr[-3000:]
    pid = daemon_pid("lab-1")
    sh("lab-1", "rm -f /data/rollout/lock.guard && mkdir /data/rollout/lock.guard")
    try:
        stopped = run_cli(tmp_path, "stop", "lab-1", "--hosts", str(fleet.fleet_path))
        assert stopped.code == 1, stopped.stderr[-3000:]
        assert "not locked, nothing done" in stopped.stderr, stopped.stderr[-3000:]
        assert daemon_pid("lab-1") == pid
        assert sh("lab-1", f"cut -d')' -f2 /proc/{pid}/stat").split()[0] in "RS"
        assert "hold" not in sh("lab-1", "ls -A /data/rollout").split()
    finally:
        sh("lab-1", "rmdir /data/rollout/lock.guard")
