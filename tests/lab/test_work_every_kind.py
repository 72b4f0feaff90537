"""Work in flight of every kind (issue 27): the stop waits for what cuzk's /status does not
show (WindowPoSt proofs, a PoRep while a fresh daemon loads its SRS), read from GetStatus
(`cuzk-bench status`) and the working memory; and a job that a GPU fault left in /status
for good is named stuck and rolled within work.stuck_after, not after work.deadline."""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from rollout import lab

from .conftest import LabFleet
from .rollout_helpers import (
    CliRun,
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
KNOBS = ("{{pool_mib: 32, load_secs: {load}, drain_mib_per_sec: 256, prove_secs: 0.3, "
         "post_secs: 1.5{more}}}")
COMMON = ("--set", "ready_timeout=15", "--set", "stop_grace=3", "--set", "work_interval=1")
BENCH = "/data/current/cuzk-bench -a http://127.0.0.1:9820"
SRS_HOLD = "/run/lab-srs-hold"  # the stand-in's drill: an SRS load that does not end
# the daemon serves: /status answers and the gRPC port accepts (curl's 7: refused)
SERVING = ("curl -fsS -o /dev/null http://127.0.0.1:9821/status && "
           "{ curl -s -o /dev/null http://127.0.0.1:9820/; [ $? -ne 7 ]; }")


def knobs(load: float = 0.3, more: str = "") -> tuple[str, str]:
    return ("--set", f"lab_knobs={KNOBS.format(load=load, more=more)}")



def playbook(tmp: Path, **work: Any) -> Path:
    """The lab playbook (usable from `tmp`) with these work settings added."""
    text = lab_playbook_text()
    lines = "".join(f"  {key}: {value}\n" for key, value in work.items())
    text, count = re.subn(r"(?m)^(work:.*\n)", lambda m: m.group(1) + lines, text)
    assert count == 1
    path = tmp / "every-kind.yaml"
    path.write_text(text)
    return path


def rollout(tmp: Path, fleet: LabFleet, version: str, *extra: str, **work: Any) -> CliRun:
    return run_cli(tmp, *rollout_args(fleet.fleet_path, version), "--playbook",
                   str(playbook(tmp, **work)), *COMMON, *extra)



def submitted(host: str) -> list[str]:
    return [e["job_id"] for e in lab.sidecar_events(host) if e.get("event") == "submitted"]


def work_events(run: CliRun, host: str) -> list[dict[str, Any]]:
    return [e for e in run.events if e["kind"] == "work" and e["host"] == host]


@pytest.fixture(scope="module")
def fleet(lab_fleet: LabFleet, tmp_path_factory: pytest.TempPathFactory) -> Iterator[LabFleet]:
    names = [h.name for h in lab_fleet.hosts]
    for host in names:  # quiet: each test turns on the work it needs
        lab.set_sidecar(host, None)
    work = tmp_path_factory.mktemp("base")
    fresh_fleet(lab_fleet, names, lambda: rollout(work, lab_fleet, "every-base", *knobs()))
    yield lab_fleet
    for host in names:  # busy again, as the lab fleet is
        lab.set_sidecar(host, lab.BUSY_SIDECAR)
        sh(host, "curio uncordon; rm -f /var/log/lab-curio.jsonl")


def test_windowpost_proofs_absent_from_status_are_never_killed(
    fleet: LabFleet, tmp_path: Path
) -> None:
    names = [h.name for h in fleet.hosts]
    for host in names:
        sh(host, "curio uncordon; rm -f /var/log/lab-curio.jsonl")
        lab.set_sidecar(host, {"proof_type": "wpost", "pause_secs": 0.05, "concurrency": 1})
    for host in names:  # a WindowPoSt on every daemon, as cuzk runs it: not in /status
        wait_until(lambda h=host: submitted(h))
        shown = status_json(host)
        assert shown["counters"]["queue_depth"] == 0
        assert all(p["partitions_done"] == p["total_partitions"] for p in shown["pipelines"])
    run = rollout(tmp_path, fleet, "every-wpost", *knobs())
    assert run.code == 0, run.stderr[-3000:]
    waited_on = set()
    for host in names:
        assert run.host_end(host)["status"] == "validated"
        stop = run.steps(host)["stop"]
        waited_on |= {j["kind"] for j in stop["data"].get("waited_on", [])}
    assert "window-post" in waited_on, "no stop saw a WindowPoSt in flight"
    for host in names:  # cordoned by hand, every proof the sidecar submitted has ended
        sh(host, "curio cordon")
    for host in names:
        wait_until(lambda h=host: set(submitted(h)) <= set(ended(h)))
        outcomes = ended(host)
        assert outcomes and set(outcomes.values()) == {"completed"}, (host, outcomes)
        lab.set_sidecar(host, None)


def test_a_porep_during_a_fresh_daemons_srs_load_is_waited_for(
    fleet: LabFleet, tmp_path: Path
) -> None:
    host = fleet.hosts[0].name
    old = daemon_pid(host)
    sh(host, f"touch {SRS_HOLD}; kill -KILL {old}")  # the supervisor starts a fresh daemon
    # both ports: cuzk binds its gRPC port (the bench's) after the status port (the stand-in
    # 0.3 s later); a proof sent between the two is refused (ci21 failed so, once)
    wait_until(lambda: daemon_pid(host) not in (None, old)
               and lab.exec_on(host, SERVING)[0] == 0)
    sh(host, f"nohup {BENCH} single -t porep --c1 /data/32gbench/c1.json > /tmp/porep.out "
             "2>&1 < /dev/null &")
    try:
        wait_until(lambda: status_json(host)["memory"]["used_bytes"] > 0)
    except AssertionError as e:
        raise AssertionError(f"the porep never reached the daemon: "
                             f"{sh(host, 'cat /tmp/porep.out; true')[-2000:]}") from e
    shown = status_json(host)  # loading its SRS (held by the drill): not in /status yet
    assert not shown["pipelines"] and not shown["counters"]["queue_depth"], shown
    run = start_cli(tmp_path, *rollout_args(fleet.fleet_path, "every-load"), "--playbook",
                    str(playbook(tmp_path)), "--limit", host, *COMMON, *knobs())
    waiting = run.wait_for(lambda e: e["kind"] == "work" and e["host"] == host
                           and e["reason"].startswith("waiting for work"))
    assert waiting["data"]["signals"]["memory"] == "busy", waiting
    sh(host, f"rm -f {SRS_HOLD}")  # the load ends, then the proof
    done = run.finish()
    assert done.code == 0, done.stderr[-3000:]
    assert "status:    COMPLETED" in wait_until(lambda: sh(host, "cat /tmp/porep.out"))
    assert "waited" in done.steps(host)["stop"]["reason"]


def test_a_job_stuck_after_a_gpu_fault_is_rolled_within_stuck_after(
    fleet: LabFleet, tmp_path: Path
) -> None:
    host = fleet.hosts[1].name
    faulty = knobs(more=", fault: gpu_stuck, fault_after: 1")  # the validation is spared
    base = rollout(tmp_path, fleet, "every-stuck-base", "--limit", host, *faulty)
    assert base.code == 0, base.stderr[-3000:]
    proof = sh(host, f"{BENCH} single -t porep --c1 /data/32gbench/c1.json")
    assert "status:    FAILED" in proof and "CUDA error" in proof, proof
    job = re.search(r"^job_id:\s+(\S+)$", proof, re.MULTILINE)
    assert job is not None
    listed = {p["job_id"]: p for p in status_json(host)["pipelines"]}
    assert job.group(1) in listed  # left in /status for good, as cuzk does
    started = time.monotonic()
    run = rollout(tmp_path, fleet, "every-stuck", "--limit", host, *knobs(),
                  "--set", "work_deadline=300", "--set", "at_deadline=skip", stuck_after=3)
    assert run.code == 0, run.stderr[-3000:]
    assert run.host_end(host)["status"] == "validated"
    assert time.monotonic() - started < 200  # within stuck_after, never the deadline
    stop = run.steps(host)["stop"]
    assert [j["id"] for j in stop["data"]["stuck"]] == [job.group(1)], stop
    assert "stuck, not waited for" in stop["reason"] and job.group(1) in stop["reason"]
    assert stop["data"]["waited"] < 60
    named = [e for e in work_events(run, host) if e["reason"].startswith("job stuck")]
    assert named and job.group(1) in named[0]["reason"]
