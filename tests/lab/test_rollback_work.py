"""The rollback's stop and the work in flight (issue 27), on one lab host whose curio-like
sidecar submits proofs: `rollout rollback` waits for the proof in flight as a rollout's
stop does (it completes); a run's own rollback stops a daemon that failed its checks at
once, naming the job it abandons; and a proof that arrives after the wait's last look,
before the signal, is waited for, not killed."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from rollout import lab

from .conftest import LabFleet
from .rollout_helpers import (
    FAST_KNOBS,
    CliRun,
    assert_serving,
    fresh_fleet,
    read_events,
    rollout_args,
    run_cli,
    sh,
    start_cli,
    status_json,
    wait_until,
)
from .rollout_helpers import sidecar_ended as ended

pytestmark = pytest.mark.lab
SLOW = 6  # seconds per proof of the daemon the stop finds busy
KNOBS = "{{pool_mib: 32, load_secs: 0.3, drain_mib_per_sec: 256, prove_secs: {secs}}}"
COMMON = ("--set", "ready_timeout=15", "--set", "stop_grace=3")


@pytest.fixture(scope="module")
def host(lab_fleet: LabFleet, tmp_path_factory: pytest.TempPathFactory
         ) -> Iterator[tuple[LabFleet, str]]:
    work = tmp_path_factory.mktemp("base")
    name = lab_fleet.hosts[0].name
    fresh_fleet(lab_fleet, [name], lambda: run_cli(
        work, *rollout_args(lab_fleet.fleet_path, "rbw-base"), "--limit", name,
        "--set", f"lab_knobs={FAST_KNOBS}", *COMMON))
    yield lab_fleet, name
    lab.set_sidecar(name, lab.BUSY_SIDECAR)  # busy again, as the lab fleet is
    sh(name, "curio uncordon; rm -f /var/log/lab-curio.jsonl")


def quiet(name: str) -> None:
    """No sidecar, no cordon, a fresh record of the sidecar's proofs."""
    lab.set_sidecar(name, None)
    sh(name, "curio uncordon; rm -f /var/log/lab-curio.jsonl")


def submitted(name: str) -> list[str]:
    return [e["job_id"] for e in lab.sidecar_events(name) if e.get("event") == "submitted"]


def roll(tmp: Path, fleet: LabFleet, name: str, version: str, *extra: str) -> CliRun:
    return run_cli(tmp, *rollout_args(fleet.fleet_path, version), "--limit", name, *COMMON,
                   *extra)


def slow_daemon(tmp: Path, fleet: LabFleet, name: str, version: str) -> None:
    """The host on a daemon whose proofs take SLOW seconds, its sidecar off."""
    quiet(name)
    run = roll(tmp, fleet, name, version, "--set", f"lab_knobs={KNOBS.format(secs=SLOW)}")
    assert run.code == 0, run.stderr[-3000:]


def in_pipelines(job: str, name: str) -> bool:
    return job in str(status_json(name).get("pipelines"))


def test_rollout_rollback_waits_for_the_proof_in_flight(host: tuple[LabFleet, str],
                                                         tmp_path: Path) -> None:
    fleet, name = host
    slow_daemon(tmp_path, fleet, name, "rbw-slow")
    lab.set_sidecar(name, {"pause_secs": 0.05, "concurrency": 1})
    job = wait_until(lambda: submitted(name))[0]
    wait_until(lambda: in_pipelines(job, name))  # the daemon works on proofs
    events = tmp_path / "rollback.jsonl"
    back = run_cli(tmp_path, "rollback", "--hosts", str(fleet.fleet_path), "--limit", name,
                   "--json", str(events))
    assert back.code == 0, back.stderr[-3000:]
    run = CliRun(back.code, back.stdout, back.stderr, read_events(events))
    stop = run.steps(name)["stop"]
    waited = {j["id"] for j in stop["data"]["waited_on"]}  # the proofs in flight by then
    assert waited and waited <= set(submitted(name)), (stop, submitted(name))
    assert "job(s) to end" in stop["reason"] and all(j in stop["reason"] for j in waited), stop
    assert run.host_end(name)["status"] == "validated", run.host_end(name)
    assert assert_serving(name) == "rbw-base"
    assert not lab.cordoned(name), f"{name} left cordoned"
    sh(name, "curio cordon")  # the sidecar ends the proofs it has in flight, submits no more
    wait_until(lambda: set(submitted(name)) <= set(ended(name)))
    lab.set_sidecar(name, None)
    assert {ended(name)[j] for j in waited} == {"completed"}, ended(name)
    assert "lost" not in ended(name).values(), ended(name)  # none killed, before or after


def test_a_runs_rollback_names_the_job_it_abandons(host: tuple[LabFleet, str],
                                                   tmp_path: Path) -> None:
    """The new daemon's validation hangs (its proof outlives validate.timeout): the run
    rolls the host back, and its stop, at once, names the proof still in flight there."""
    fleet, name = host
    quiet(name)
    run = roll(tmp_path, fleet, name, "rbw-hung", "--set", "validate_timeout=3",
               "--set", f"lab_knobs={KNOBS.format(secs=60)}")
    end = run.host_end(name)
    assert end["status"] == "rolled_back", end
    stop = run.steps(name)["rollback-stop"]
    abandoned = stop["data"]["abandoned"]
    assert stop["status"] == "changed" and abandoned, stop
    assert "stopped at once, abandoning" in stop["reason"], stop
    assert all(j["id"] in stop["reason"] for j in abandoned), stop
    assert "no cordon held" not in stop["reason"], stop  # the run had cordoned the host
    assert not lab.cordoned(name), f"{name} left cordoned"


def test_a_proof_that_arrives_before_the_signal_is_waited_for(host: tuple[LabFleet, str],
                                                              tmp_path: Path) -> None:
    """Parked between the wait's end and the stop call: the sidecar claims a task late
    (curio claimed it before its poll saw the cordon); the stop's own look finds it."""
    fleet, name = host
    slow_daemon(tmp_path, fleet, name, "rbw-late-base")
    env = {"ROLLOUT_FAILPOINTS": f"park-before-signal@{name}", "ROLLOUT_PARK_DIR": str(tmp_path)}
    run = start_cli(tmp_path, *rollout_args(fleet.fleet_path, "rbw-late"), "--limit", name,
                    *COMMON, "--set", f"lab_knobs={FAST_KNOBS}", env=env)
    parked = run.wait_for(lambda e: e["kind"] == "parked" and e["host"] == name)
    assert lab.cordoned(name)
    lab.set_sidecar(name, {"pause_secs": 0.05, "concurrency": 1, "late_claims": 1})
    job = wait_until(lambda: submitted(name))[0]
    wait_until(lambda: in_pipelines(job, name))
    Path(parked["data"]["go"]).touch()
    done = run.finish()
    assert done.code == 0, done.stderr[-3000:]
    stop = done.steps(name)["stop"]
    assert "work arrived after the wait's last look, before the signal" in stop["reason"], stop
    assert job in {j["id"] for j in stop["data"]["late"]} and job in stop["reason"], stop
    wait_until(lambda: job in ended(name))
    assert ended(name)[job] == "completed", ended(name)
    claims = [e.get("after_cordon") for e in lab.sidecar_events(name)
              if e.get("event") == "submitted"]  # one late claim, then none until uncordoned
    assert claims[0] is True and claims.count(True) == 1, claims
    assert assert_serving(name) == "rbw-late"
