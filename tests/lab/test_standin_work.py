"""The stand-in at cuzk's proportions and under real work (issue 17): sizes scaled from
cuzk's, proofs that take time and show in /status as cuzk shows them, a budget that
blocks, the C1's ids checked, the PCE rewritten in every lifetime, the pool released when
its holder dies, and a curio-like sidecar that submits proofs and honours cordon."""

from __future__ import annotations

import re
import time
from pathlib import Path
from typing import Any

import pytest

from rollout import lab
from rollout.lab.c1 import c1_json
from rollout.lab.fleet import wait_for_ssh

from .conftest import LISTEN, LOG, PARAMS, ZK, LabFleet, Standin
from .rollout_helpers import FAST_KNOBS, assert_serving, run_cli
from .rollout_helpers import sidecar_ended as ended

pytestmark = pytest.mark.lab
MIB = 1 << 20
C1 = f"{ZK}/c1.json"
PROVE = f"-a http://{LISTEN} single -t porep --c1 {C1}"
PCE = f"{PARAMS}/pce-porep-32g.bin"
SCALED = {"pool_mib": None}  # no override: the SRS is cuzk's 44 GiB at the lab's scale
KILL_EVERYTHING = "kill -9 -1; true"  # every process but PID 1 (and this shell)


def wait_until(predicate, timeout: float = 20.0, step: float = 0.1):  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(step)
    raise AssertionError("condition not met in time")


def start(s: Standin, knobs: dict[str, Any] | None = None, budget: str = "auto") -> None:
    """Params, a C1 for sector 1 / miner 1000, and the daemon with these knobs; None as a
    knob's value leaves the knob out (the stand-in's default)."""
    s.make_params()
    s.put(C1, c1_json(1, 1000))
    s.write_config(knobs, budget)
    config = s.ok(f"cat {ZK}/cuzk.toml")
    kept = [ln for ln in config.splitlines() if not ln.endswith("= null")]
    s.put(f"{ZK}/cuzk.toml", ("\n".join(kept) + "\n").encode())
    s.ok(f"cd {ZK} && nohup /data/bin/cuzk-daemon -c {ZK}/cuzk.toml > {LOG} 2>&1 < /dev/null &")
    s.wait_ready()


def kill_daemon(s: Standin) -> None:
    """The daemon SIGKILLed, its files kept."""
    s.ok(f"kill -KILL {s.wait_pid()}")
    wait_until(lambda: s.pid() is None, timeout=5)


def bench_in_background(s: Standin, args: str, out: str) -> None:
    s.ok(f"nohup /data/bin/cuzk-bench {args} > {out} 2>&1 < /dev/null &")


def result(s: Standin, out: str) -> str:
    return str(wait_until(lambda: (text := s.sh(f"cat {out}")[1]) and
                          ("=== Proof Result ===" in text or "Error:" in text) and text))


def test_sizes_are_cuzks_scaled_by_one_factor(standin: Standin) -> None:
    start(standin, {**SCALED, "prove_secs": 0.2})
    code, out = standin.bench(PROVE)
    assert code == 0 and "status:    COMPLETED" in out, out
    body = wait_until(lambda: (b := standin.status()[1]) and b["allocations"]["pce"] and b)
    assert [a["bytes"] for a in body["allocations"]["srs"]] == [44 * MIB]  # 44 GiB / 1024
    assert [a["bytes"] for a in body["allocations"]["pce"]] == [26 * MIB]  # 26 GiB / 1024
    assert body["memory"]["used_bytes"] == 44 * MIB + 26 * MIB
    assert int(standin.ok(f"stat -c %s {PCE}")) == 26 * MIB
    standin.cleanup()
    start(standin, {**SCALED, "scale": "1/2048", "prove_secs": 0.2})
    assert "status:    COMPLETED" in standin.bench(PROVE)[1]
    body = wait_until(lambda: (b := standin.status()[1]) and b["allocations"]["pce"] and b)
    assert [a["bytes"] for a in body["allocations"]["srs"]] == [44 * MIB // 2]
    assert [a["bytes"] for a in body["allocations"]["pce"]] == [13 * MIB]


def test_a_proof_in_flight_shows_in_status_as_cuzk_shows_it(standin: Standin) -> None:
    start(standin, {"prove_secs": 6.0})
    bench_in_background(standin, PROVE, "/tmp/first.out")
    bench_in_background(standin, PROVE, "/tmp/second.out")

    def running() -> dict[str, Any] | None:
        body = standin.status()[1] or {}
        busy = [w for w in body.get("gpu_workers", []) if w["current_job"]]
        both = body and body["counters"]["queue_depth"] + len(body["pipelines"]) == 2
        return body if busy and both else None

    body: dict[str, Any] = wait_until(running)
    [worker] = [w for w in body["gpu_workers"] if w["current_job"]]
    assert worker["state"] == "proving" and isinstance(worker["current_partition"], int)
    assert isinstance(worker["busy_secs"], float)
    pipeline = next(p for p in body["pipelines"] if p["job_id"] == worker["current_job"])
    assert pipeline["proof_kind"] == "porep-c2" and pipeline["total_partitions"] == 10
    assert isinstance(pipeline["started_secs_ago"], float) and pipeline["started_secs_ago"] >= 0
    assert {p["state"] for p in pipeline["partitions"]} <= {"pending", "synthesizing",
                                                             "synth_done", "gpu", "done"}
    assert pipeline["partitions_done"] < 10
    assert body["memory"]["used_bytes"] >= 32 * MIB + 14 * MIB  # the SRS and one partition
    first = result(standin, "/tmp/first.out")
    assert "status:    COMPLETED" in first, first
    job = re.search(r"^job_id:    (\S+)$", first, re.MULTILINE)
    assert job
    done = next(p for p in standin.status()[1]["pipelines"]  # type: ignore[index]
                if p["job_id"] == job.group(1))
    assert done["partitions_done"] == 10  # cuzk keeps a finished job listed for 30 s
    assert "status:    COMPLETED" in result(standin, "/tmp/second.out")


def test_sigterm_with_a_proof_in_flight_kills_it_at_once(standin: Standin) -> None:
    start(standin, {"prove_secs": 60.0})
    bench_in_background(standin, PROVE, "/tmp/killed.out")
    wait_until(lambda: (b := standin.status()[1]) and any(w["current_job"]
                                                          for w in b["gpu_workers"]))
    standin.ok(f"kill -TERM {standin.wait_pid()}")  # cuzk has no handler: no finish, no abort
    wait_until(lambda: standin.pid() is None, timeout=5)
    out = result(standin, "/tmp/killed.out")
    assert "Error: Prove RPC failed" in out and "=== Proof Result ===" not in out, out
    assert "proof completed" not in standin.log()


def test_the_budget_blocks_a_proof_it_cannot_hold_visibly(standin: Standin) -> None:
    # The SRS (44 MiB) fits, one partition (14 MiB) more does not: the pipeline is
    # registered and its partitions stay pending, as cuzk's acquire waits forever.
    start(standin, {**SCALED, "prove_secs": 0.2}, budget="57MiB")
    bench_in_background(standin, PROVE, "/tmp/blocked.out")
    body = wait_until(lambda: (b := standin.status()[1]) and b["pipelines"] and b)
    [pipeline] = body["pipelines"]
    assert {p["state"] for p in pipeline["partitions"]} == {"pending"}
    assert body["memory"]["used_bytes"] == 44 * MIB
    assert body["memory"]["available_bytes"] == 13 * MIB  # less than one partition
    assert not any(w["current_job"] for w in body["gpu_workers"])
    code, out = standin.sh(f"timeout 3 /data/bin/cuzk-bench {PROVE}")  # queued behind it
    assert code == 124, out
    assert standin.status()[1]["pipelines"][0]["partitions_done"] == 0  # type: ignore[index]
    standin.cleanup()
    # Not even the SRS fits: cuzk warns once and waits; nothing is registered.
    start(standin, {**SCALED, "prove_secs": 0.2}, budget="40MiB")
    bench_in_background(standin, PROVE, "/tmp/blocked.out")
    wait_until(lambda: "acquire request exceeds total budget" in standin.log())
    body = standin.status()[1]
    assert body and body["pipelines"] == [] and body["memory"]["used_bytes"] == 0
    assert "=== Proof Result ===" not in standin.sh("cat /tmp/blocked.out")[1]


def test_a_c1_for_other_ids_fails_as_cuzks_self_check(standin: Standin) -> None:
    start(standin, {"prove_secs": 0.2})
    assert "status:    COMPLETED" in standin.bench(f"{PROVE} --sector-num 1 --miner-id 1000")[1]
    for args, ids in (("--miner-id 1001", "sector=1, miner=1001"),
                      ("--sector-num 7", "sector=7, miner=1000")):
        code, out = standin.bench(f"{PROVE} {args}")
        assert code == 0 and "status:    FAILED" in out, out  # the bench exits 0 on FAILED
        assert ("error:     PoRep proof self-check failed: assembled proof did not verify "
                f"({ids})") in out, out
    standin.put(f"{ZK}/seven.json", c1_json(7, 1000))
    code, out = standin.bench(f"-a http://{LISTEN} single -t porep --c1 {ZK}/seven.json "
                              "--sector-num 7")
    assert "status:    COMPLETED" in out, out
    standin.put(f"{ZK}/garbage.json", b'{"c1": "lab"}')
    code, out = standin.bench(f"-a http://{LISTEN} single -t porep --c1 {ZK}/garbage.json")
    assert "error:     C1 parse failed: failed to parse C1 output wrapper JSON" in out, out


def test_the_pce_is_rewritten_in_every_lifetime_and_a_stop_leaves_the_tmp(
    standin: Standin,
) -> None:
    start(standin, {"prove_secs": 0.2})
    assert "status:    COMPLETED" in standin.bench(PROVE)[1]
    first = wait_until(lambda: "PCE saved to disk" in standin.log()
                       and standin.ok(f"stat -c %i {PCE}").strip())
    kill_daemon(standin)
    start(standin, {"prove_secs": 0.2, "pce_write_secs": 60.0})
    standin.ok(f"test -f {PCE}")  # the last lifetime's file is there, and never read back
    assert "status:    COMPLETED" in standin.bench(PROVE)[1]
    tmp = f"{PARAMS}/pce-porep-32g.tmp"
    wait_until(lambda: standin.sh(f"test -s {tmp}")[0] == 0)  # written anew, through .tmp
    standin.ok(f"kill -TERM {standin.wait_pid()}")
    wait_until(lambda: standin.pid() is None, timeout=5)
    standin.ok(f"test -f {tmp}")  # a stop during the write leaves it behind
    assert standin.ok(f"stat -c %i {PCE}").strip() == first  # the old file untouched
    start(standin, {"prove_secs": 0.2})
    assert "status:    COMPLETED" in standin.bench(PROVE)[1]
    wait_until(lambda: standin.ok(f"stat -c %i {PCE}").strip() != first)


def test_the_pool_is_released_when_every_process_is_sigkilled(standin: Standin) -> None:
    start(standin, {"drain_mib_per_sec": 1})  # the keeper alone would take half a minute
    assert "status:    COMPLETED" in standin.bench(PROVE)[1]
    assert any(f.startswith("lab-srs-pool.") for f in standin.pool_files())
    standin.sh(KILL_EVERYTHING)  # the daemon, its keeper, sshd: all of them at once
    wait_until(lambda: not any(f.startswith("lab-srs-pool.") for f in standin.pool_files()),
               timeout=5)
    port = next(h["port"] for h in lab.status() if h["name"] == standin.host)
    wait_for_ssh(port)  # the host lives on: lab-init started sshd again


def test_a_never_release_leak_survives_every_process_killed(standin: Standin) -> None:
    start(standin, {"fault": "never_release"})
    assert "status:    COMPLETED" in standin.bench(PROVE)[1]
    [pool] = [f for f in standin.pool_files() if f.startswith("lab-srs-pool.")]
    standin.ok("test -f /run/lab-pool-leaked/" + pool)  # marked as it was made
    standin.sh(KILL_EVERYTHING)
    wait_until(lambda: standin.pid() is None)
    wait_until(lambda: "lab-pool-keeper" not in standin.sh("ps -eo comm")[1])
    # a decoy of a dead holder, unmarked: once lab-init has released it, it has seen the
    # leak too, and kept it
    standin.ok("head -c 1M /dev/zero > /dev/shm/lab-srs-pool.999999")
    wait_until(lambda: "lab-srs-pool.999999" not in standin.pool_files())
    assert pool in standin.pool_files()
    standin.ok("rm -f /run/lab-pool-leaked/*")


def submitted(host: str) -> list[str]:
    return [e["job_id"] for e in lab.sidecar_events(host) if e["event"] == "submitted"]



def test_the_sidecar_submits_proofs_holds_memory_and_honours_cordon(standin: Standin) -> None:
    host = standin.host
    start(standin, {"prove_secs": 0.3})
    standin.ok("rm -f /var/log/lab-curio.jsonl; curio uncordon")
    assert "sidecar: off" in standin.ok("curio status")  # off: the standin fixture quiets it
    lab.set_sidecar(host, {"c1": C1, "hold_mib": 24, "pause_secs": 0.05})
    try:
        wait_until(lambda: sum(1 for v in ended(host).values() if v == "completed") >= 3)
        pid = int(wait_until(lambda: standin.sh("pgrep -f '^/usr/bin/python3 "
                                                "/usr/local/bin/curio run'")[1].split()[0]))
        rss_kib = int(standin.ok(f"grep VmRSS /proc/{pid}/status").split()[1])
        assert rss_kib >= 24 * 1024  # memory of its own, in the same cgroup
        assert "Node cordoned" in standin.ok("curio cordon")
        assert lab.cordoned(host)
        # as curio, it sees the cordon on its next poll; the proofs it submitted until then
        # finish; then it submits nothing new
        wait_until(lambda: any(e["event"] == "cordon_seen" and e.get("cordoned")
                               for e in lab.sidecar_events(host)))
        wait_until(lambda: set(submitted(host)) <= set(ended(host)))
        before = submitted(host)
        for _ in range(3):  # time in which an uncordoned sidecar would submit several
            assert "status:    COMPLETED" in standin.bench(PROVE)[1]
        assert submitted(host) == before
        assert "Node uncordoned" in standin.ok("curio uncordon")
        wait_until(lambda: len(submitted(host)) > len(before)
                   and set(submitted(host)[len(before):]) & set(ended(host)))
        assert set(ended(host).values()) == {"completed"}  # none lost, none failed
    finally:
        lab.set_sidecar(host, None)
        standin.ok("curio uncordon")
    wait_until(lambda: standin.sh("pgrep -f '/usr/local/bin/[c]urio run'")[0] == 1)


def test_after_every_process_is_sigkilled_heal_then_a_rollout_succeed(
    lab_fleet: LabFleet, tmp_path: Path
) -> None:
    host = lab_fleet.hosts[1].name
    hosts = ("--hosts", str(lab_fleet.fleet_path), "--limit", host)
    # a pool big enough that, left behind, it would fail the next rollout's drain
    big = FAST_KNOBS.replace("pool_mib: 32", "pool_mib: 160")
    knobs = ("--set", f"lab_knobs={big}", "--set", "ready_timeout=15")
    first = run_cli(tmp_path, "rollout", *hosts, *knobs, "--set", "version=killed-1")
    assert first.code == 0, first.stderr[-3000:]
    assert any(f.startswith("lab-srs-pool.") for f in lab.exec_on(host, "ls /dev/shm")[1].split())
    lab.exec_on(host, KILL_EVERYTHING)
    wait_until(lambda: lab.exec_on(host, "pgrep -x cuzk-daemon; pgrep -f '[s]upervisor.py'")[0]
               == 1)
    wait_until(lambda: "lab-srs-pool." not in lab.exec_on(host, "ls /dev/shm")[1])
    wait_for_ssh(lab_fleet.hosts[1].port)  # lab-init starts sshd again, as a provider's init
    healed = run_cli(tmp_path, "heal", *hosts)
    assert healed.code == 0, healed.stdout + healed.stderr
    assert assert_serving(host) == "killed-1"
    again = run_cli(tmp_path, "rollout", *hosts, *knobs, "--set", "version=killed-2")
    assert again.code == 0, again.stderr[-3000:]
    assert assert_serving(host) == "killed-2"
