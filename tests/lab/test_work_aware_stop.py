"""A busy prover (issue 17): the lab's curio-like sidecar submits proofs to every daemon
without pause while rollouts cordon each host (`curio cordon`), wait for the proofs in
flight, and uncordon it. No proof the daemons accepted is killed unless the operator chose
`stop` at the deadline, and then the events name the jobs abandoned; a host is never left
cordoned, not even when the controller is SIGKILLed while the host waits for its work."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from rollout import lab

from .conftest import LabFleet
from .rollout_helpers import (
    FAST_KNOBS,
    CliRun,
    assert_serving,
    daemon_pid,
    fresh_fleet,
    lab_playbook_text,
    rollout_args,
    run_cli,
    sh,
    start_cli,
    status_json,
    wait_until,
)
from .rollout_helpers import (
    sidecar_ended as ended,
)

pytestmark = pytest.mark.lab
KNOBS = "{{pool_mib: 32, load_secs: 0.3, drain_mib_per_sec: 256, prove_secs: {secs}}}"
COMMON = ("--set", "ready_timeout=15", "--set", "stop_grace=3")
SLOW = 8  # seconds per proof: longer than the deadlines below


WORK_VARS = {"work_deadline": "120", "work_interval": "1", "at_deadline": "skip"}


def work_playbook(tmp: Path) -> Path:
    """The lab playbook (its relative paths made absolute), whose work section cordons with
    curio's cordon and uncordon, with this module's defaults for its vars (WORK_VARS): the
    deadline and the choice at it from --set."""
    text = lab_playbook_text()
    assert re.search(r"(?m)^work:.*\n  cordon: curio cordon\b.*\n  uncordon: curio uncordon\b",
                     text), "the lab playbook's work section cordons with curio"
    head, rest = text.split("\nrolling:", 1)  # the vars (work.at_deadline is one of the rest)
    for var, value in WORK_VARS.items():
        head, count = re.subn(rf"(?m)^  {var}: \S+", f"  {var}: {value}", head)
        assert count == 1, var
    path = tmp / "work.yaml"
    path.write_text(head + "\nrolling:" + rest)
    return path




def submitted(host: str) -> list[str]:
    return [e["job_id"] for e in lab.sidecar_events(host) if e.get("event") == "submitted"]


def sidecar_sees_cordon(host: str) -> bool:
    """The sidecar's last poll found its host cordoned (it reads the cordon late, as curio)."""
    seen = [e.get("cordoned") for e in lab.sidecar_events(host) if e.get("event") == "cordon_seen"]
    return seen[-1:] == [True]


def settle_sidecars(hosts: list[str]) -> None:
    """Cordon by hand, then wait until the sidecar has seen it and every proof submitted
    has ended."""
    for host in hosts:
        sh(host, "curio cordon")
    for host in hosts:
        wait_until(lambda h=host: sidecar_sees_cordon(h))
        wait_until(lambda h=host: set(submitted(h)) <= set(ended(h)))


@pytest.fixture(scope="module")
def fleet(lab_fleet: LabFleet, tmp_path_factory: pytest.TempPathFactory) -> Iterator[LabFleet]:
    work = tmp_path_factory.mktemp("base")
    names = [h.name for h in lab_fleet.hosts]
    fresh_fleet(lab_fleet, names, lambda: run_cli(
        work, *rollout_args(lab_fleet.fleet_path, "work-base"), "--set",
        f"lab_knobs={FAST_KNOBS}", *COMMON))
    yield lab_fleet
    for host in names:  # busy again, as the lab fleet is
        lab.set_sidecar(host, lab.BUSY_SIDECAR)
        sh(host, "curio uncordon; rm -f /var/log/lab-curio.jsonl")


def sidecars_on(hosts: list[str], concurrency: int = 1) -> None:
    for host in hosts:
        sh(host, "curio uncordon; rm -f /var/log/lab-curio.jsonl")
        lab.set_sidecar(host, {"pause_secs": 0.05, "concurrency": concurrency})
    for host in hosts:  # each daemon has accepted work before the rollout begins
        wait_until(lambda h=host: submitted(h))


def rollout(tmp: Path, fleet: LabFleet, version: str, *extra: str) -> CliRun:
    return run_cli(tmp, *rollout_args(fleet.fleet_path, version), "--playbook",
                   str(work_playbook(tmp)), *COMMON, *extra)


def slow_daemons(tmp: Path, fleet: LabFleet, version: str, names: list[str]) -> None:
    """These hosts on daemons whose proofs take SLOW seconds, with no sidecar running."""
    for host in names:
        lab.set_sidecar(host, None)
        sh(host, "curio uncordon")
    base = rollout(tmp, fleet, version, "--limit", ",".join(names),
                   "--set", f"lab_knobs={KNOBS.format(secs=SLOW)}")
    assert base.code == 0, base.stderr[-3000:]


def work_events(run: CliRun, host: str) -> list[dict[str, Any]]:
    return [e for e in run.events if e["kind"] == "work" and e["host"] == host]


def test_a_busy_fleet_rolls_with_no_proof_killed(fleet: LabFleet, tmp_path: Path) -> None:
    names = [h.name for h in fleet.hosts]
    sidecars_on(names)
    knobs = ("--set", "lab_knobs={pool_mib: 32, load_secs: 0.3, drain_mib_per_sec: 256, "
             "prove_secs: 0.5}")
    run = rollout(tmp_path, fleet, "work-busy", *knobs)
    assert run.code == 0, run.stderr[-3000:]
    for host in names:
        assert run.host_end(host)["status"] == "validated"
        assert not lab.cordoned(host), f"{host} left cordoned"
        assert sh(host, "test -e /data/rollout/cordoned.json && echo left || echo none"
                  ).strip() == "none"
        reasons = [e["reason"] for e in work_events(run, host)]
        assert reasons[0] == "cordoned (curio cordon)" and reasons[-1].startswith("uncordoned")
        assert assert_serving(host) == "work-busy"
    for host in names:  # the sidecar submits again once uncordoned
        before = len(submitted(host))
        wait_until(lambda h=host, n=before: len(submitted(h)) > n)
    settle_sidecars(names)
    for host in names:
        outcomes = ended(host)
        assert outcomes and set(outcomes.values()) == {"completed"}, (host, outcomes)


@pytest.mark.parametrize("choice", ["skip", "stop"])
def test_a_deadline_shorter_than_a_proof(fleet: LabFleet, tmp_path: Path, choice: str) -> None:
    names = [h.name for h in fleet.hosts]
    slow_daemons(tmp_path, fleet, f"work-slow-{choice}", names)
    pids = {host: daemon_pid(host) for host in names}
    sidecars_on(names, concurrency=2)  # one proof on the GPU, one queued behind it
    run = rollout(tmp_path, fleet, f"work-{choice}", "--set", "work_deadline=2",
                  "--set", f"at_deadline={choice}",
                  "--set", f"lab_knobs={KNOBS.format(secs=0.3)}")
    for host in names:
        events = work_events(run, host)
        waited = [e for e in events if e["reason"].startswith("waiting for work")]
        assert waited and all(e["data"]["jobs"] or e["data"]["queue_depth"] for e in waited)
        named = {j["id"] for e in waited for j in e["data"]["jobs"]}
        assert named and named <= set(submitted(host)), (named, submitted(host))
        assert not lab.cordoned(host), f"{host} left cordoned"
        end = run.host_end(host)
        if choice == "skip":
            assert end["status"] == "skipped" and "busy" in end["reason"], end
            assert any(job in end["reason"] for job in named), end
            assert daemon_pid(host) == pids[host]  # untouched: the same daemon serves
            assert set(status_json(host)) >= {"uptime_secs", "counters"}
        else:
            assert end["status"] == "validated", end
            stop = run.steps(host)["stop"]
            abandoned = {j["id"] for j in stop["data"]["abandoned"]}
            assert abandoned and "abandoning" in stop["reason"], stop
            assert all(job in stop["reason"] for job in abandoned), stop
            wait_until(lambda h=host, a=abandoned: a <= set(ended(h)))
            assert {ended(host)[j] for j in abandoned} == {"lost"}  # killed, and said so
            assert assert_serving(host) == f"work-{choice}"
    assert run.code == (1 if choice == "skip" else 0), run.stderr[-3000:]
    settle_sidecars(names)
    if choice == "skip":  # nothing was killed
        for host in names:
            assert set(ended(host).values()) == {"completed"}, ended(host)


def test_a_controller_killed_while_the_host_waits_leaves_it_serving_and_uncordoned(
    fleet: LabFleet, tmp_path: Path
) -> None:
    host = fleet.hosts[0].name
    slow_daemons(tmp_path, fleet, "work-kill-base", [host])
    pid = daemon_pid(host)
    sidecars_on([host], concurrency=2)
    run = start_cli(tmp_path, *rollout_args(fleet.fleet_path, "work-kill"), "--playbook",
                    str(work_playbook(tmp_path)), "--limit", host, *COMMON)
    run.wait_for(lambda e: e["kind"] == "work" and e["host"] == host
                 and e["reason"].startswith("waiting for work"))
    assert lab.cordoned(host)
    run.process.kill()  # SIGKILL: no handler, no goodbye
    run.process.communicate(timeout=60)
    # no further command: the host's guard alone uncordons it, the daemon untouched
    wait_until(lambda: not lab.cordoned(host), bound=300)
    wait_until(lambda: "none" in sh(
        host, "test -e /data/rollout/cordoned.json && echo left || echo none"), bound=60)
    assert daemon_pid(host) == pid
    assert sh(host, "test -e /data/rollout/hold && echo held || echo free").strip() == "free"
    assert set(status_json(host)) >= {"uptime_secs", "counters"}
    settle_sidecars([host])
    assert set(ended(host).values()) == {"completed"}, ended(host)
    sh(host, "rm -f /data/rollout/lock")  # the killed run's lock: not the next test's


def test_a_single_stop_leaves_the_host_cordoned_until_start(
    fleet: LabFleet, tmp_path: Path
) -> None:
    """`rollout stop HOST` takes the prover down for maintenance: curio must not send it
    work, so the cordon stays (status shows it) until `rollout start HOST` serves again."""
    host = fleet.hosts[0].name
    hosts = ("--hosts", str(fleet.fleet_path), "--playbook", str(work_playbook(tmp_path)))
    sh(host, "curio uncordon")
    stopped = run_cli(tmp_path, "stop", host, *hosts)
    assert stopped.code == 0, stopped.stderr[-3000:]
    assert lab.cordoned(host)
    assert "left cordoned" in stopped.stderr
    shown = run_cli(tmp_path, "status", *hosts)
    assert "cordoned" in shown.stdout + shown.stderr
    started = run_cli(tmp_path, "start", host, *hosts)
    assert started.code == 0, started.stderr[-3000:]
    assert not lab.cordoned(host)
    assert "none" in sh(host, "test -e /data/rollout/cordoned.json && echo left || echo none")
    assert_serving(host)
