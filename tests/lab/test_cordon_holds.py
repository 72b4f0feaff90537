"""A cordon that holds (issue 27): curio reads its node's cordon on its database poll (every
30 s), so a task it claims just after `curio cordon` returned still reaches cuzk. The lab's
curio-like sidecar reads its cordon on a poll of its own (`cordon_poll_secs`) and claims
proofs until then, each recorded with `after_cordon`. The stop waits work.cordon_takes (set
to the sidecar's poll) and for every proof claimed meanwhile: none is killed, and the stop's
result names the wait."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from rollout import lab

from .conftest import LabFleet
from .rollout_helpers import FAST_KNOBS, CliRun, fresh_fleet, rollout_args, run_cli, sh, wait_until
from .rollout_helpers import sidecar_ended as ended

pytestmark = pytest.mark.lab
POLL = 8  # seconds: the sidecar's cordon poll here, and work.cordon_takes
# a proof of 1.5 s (looked at each second while it runs), then the daemon idle for a
# second: a cordon often finds it idle, and the sidecar claims again before its next poll
SIDECAR = {"pause_secs": 1.0, "concurrency": 1, "cordon_poll_secs": float(POLL)}
KNOBS = "{pool_mib: 32, load_secs: 0.3, drain_mib_per_sec: 256, prove_secs: 1.5}"
COMMON = ("--set", "ready_timeout=15", "--set", "stop_grace=3", "--set", "work_deadline=120",
          "--set", "at_deadline=skip", "--set", f"work_cordon_takes={POLL}",
          "--set", f"lab_knobs={KNOBS}")
ROLLOUTS = 3  # a rollout where no sidecar claimed after the cordon proves nothing: again



def events(host: str, kind: str) -> list[dict[str, Any]]:
    return [e for e in lab.sidecar_events(host) if e.get("event") == kind]



def claimed_after_cordon(host: str) -> list[str]:
    """The proofs the sidecar submitted while its host was cordoned (before its poll saw it)."""
    return [e["job_id"] for e in events(host, "submitted") if e.get("after_cordon") is True]


def refused_before_the_cordon_was_seen(host: str) -> list[dict[str, Any]]:
    """Claims that found no daemon while the sidecar still took its host as schedulable: a
    task sent to a prover stopped before the cordon could take effect."""
    refused = []
    for event in lab.sidecar_events(host):
        if event.get("event") == "cordon_seen" and event.get("cordoned") is True:
            break
        if event.get("event") in ("unreachable", "lost"):
            refused.append(event)
    return refused


@pytest.fixture(scope="module")
def fleet(lab_fleet: LabFleet, tmp_path_factory: pytest.TempPathFactory) -> Iterator[LabFleet]:
    work = tmp_path_factory.mktemp("base")
    names = [h.name for h in lab_fleet.hosts]
    fresh_fleet(lab_fleet, names, lambda: run_cli(
        work, *rollout_args(lab_fleet.fleet_path, "cordon-base"), "--set",
        f"lab_knobs={FAST_KNOBS}", "--set", "ready_timeout=15"))
    yield lab_fleet
    for host in names:  # busy again, as the lab fleet is
        lab.set_sidecar(host, lab.BUSY_SIDECAR)
        sh(host, "curio uncordon; rm -f /var/log/lab-curio.jsonl")


def busy_rollout(tmp: Path, fleet: LabFleet, version: str) -> CliRun:
    """Every sidecar on (SIDECAR, a fresh record), then a rollout of the whole fleet."""
    names = [h.name for h in fleet.hosts]
    for host in names:
        sh(host, "curio uncordon; rm -f /var/log/lab-curio.jsonl")
        lab.set_sidecar(host, SIDECAR)
    for host in names:  # each daemon has had work before the rollout begins
        wait_until(lambda h=host: events(h, "submitted"))
    return run_cli(tmp, *rollout_args(fleet.fleet_path, version), *COMMON)


def test_a_task_claimed_after_the_cordon_is_waited_for_not_killed(
    fleet: LabFleet, tmp_path: Path
) -> None:
    names = [h.name for h in fleet.hosts]
    for attempt in range(1, ROLLOUTS + 1):
        run = busy_rollout(tmp_path, fleet, f"cordon-{attempt}")
        assert run.code == 0, run.stderr[-3000:]
        late = {host: claimed_after_cordon(host) for host in names}
        if any(late.values()):
            break
    else:
        pytest.fail(f"in {ROLLOUTS} rollouts no sidecar claimed a proof after the cordon")
    for host in names:
        stop = run.steps(host)["stop"]
        assert "cordon in effect: waited" in stop["reason"], stop
        assert f"(work.cordon_takes {POLL}s)" in stop["reason"], stop
        assert stop["data"]["waited"] >= POLL and stop["data"]["cordon"]["takes"] == POLL, stop
        # every proof claimed in the window ended, and completed: none was killed
        wait_until(lambda h=host: set(late[h]) <= set(ended(h)))
        assert {ended(host)[job] for job in late[host]} <= {"completed"}, (host, ended(host))
        assert "lost" not in ended(host).values(), (host, ended(host))
        assert not refused_before_the_cordon_was_seen(host), lab.sidecar_events(host)
        assert run.host_end(host)["status"] == "validated"
        assert not lab.cordoned(host), f"{host} left cordoned"
