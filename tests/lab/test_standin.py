"""The stand-in cuzk behaves like the real one where a rollout can tell the difference."""

from __future__ import annotations

import json
import re
import time

import docker
import pytest

from rollout import lab
from rollout.lab.c1 import c1_json

from .conftest import (
    LISTEN,
    LOG,
    PARAMS,
    POREP_PARAMS,
    PROVER_VERSION,
    ZK,
    Standin,
    extract_standin,
)

pytestmark = pytest.mark.lab
MIB = 1 << 20
C1 = f"{ZK}/c1.json"
PROVE = f"-a http://{LISTEN} single -t porep --c1 {C1}"
STATUS_KEYS = {"uptime_secs", "memory", "synthesis", "pipelines", "gpu_workers", "allocations",
               "counters", "buffers"}


def wait_until(predicate, timeout: float = 10.0, step: float = 0.1):  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(step)
    raise AssertionError("condition not met in time")


def make_c1(s: Standin, sector_num: int = 1, miner_id: int = 1000) -> None:
    """A C1 in cuzk's shape, made for these ids (the bench asks for 1 and 1000 by default)."""
    s.put(C1, c1_json(sector_num, miner_id))


def first_proof(s: Standin) -> None:
    """Params and input in place, one proof: the SRS is loaded only now, as in cuzk."""
    s.make_params()
    make_c1(s)
    code, out = s.bench(PROVE)
    assert code == 0 and "status:    COMPLETED" in out, out


READINESS_PROBE = r"""
import json, socket, subprocess, time
t0 = time.monotonic()
subprocess.Popen(["/data/bin/cuzk-daemon", "-c", "%(config)s"],
                 stdout=open("%(log)s", "w"), stderr=subprocess.STDOUT)
line_at = port_at = None
while port_at is None and time.monotonic() - t0 < 10:
    if line_at is None and "ready, serving on" in open("%(log)s").read():
        line_at = time.monotonic() - t0
    try:
        socket.create_connection(("127.0.0.1", 9820), timeout=0.2).close()
        port_at = time.monotonic() - t0
    except OSError:
        time.sleep(0.01)
print(json.dumps({"line_at": line_at, "port_at": port_at}))
"""


def test_version_is_stamped_at_build_but_never_reported(standin: Standin) -> None:
    for exe in ("cuzk-daemon", "cuzk-bench"):
        assert f'BUILD_VERSION = "{PROVER_VERSION}"' in standin.ok(f"cat /data/bin/{exe}")
        code, out = standin.sh(f"/data/bin/{exe} --version")
        assert code == 2, out  # like cuzk (clap): there is no such flag


def test_ready_line_before_bind_and_nothing_loaded_at_start(standin: Standin) -> None:
    standin.write_config({"load_secs": 1.5, "bind_delay_secs": 0.4})
    probe = READINESS_PROBE % {"config": f"{ZK}/cuzk.toml", "log": LOG}
    timing = json.loads(standin.ok(f"python3 -c '{probe}'").strip().splitlines()[-1])
    assert timing["port_at"] is not None, standin.log()
    assert timing["line_at"] is not None and timing["line_at"] < timing["port_at"]
    body = standin.wait_ready()
    assert body["memory"]["used_bytes"] == 0 and body["allocations"]["srs"] == []
    assert not standin.pool_files()  # the SRS waits for the first proof


def test_status_has_cuzks_keys_and_no_version_or_pid(standin: Standin) -> None:
    standin.start()
    body = standin.wait_ready()
    assert set(body) == STATUS_KEYS
    assert isinstance(body["uptime_secs"], float)
    assert set(body["memory"]) == {"total_bytes", "used_bytes", "available_bytes"}
    assert set(body["counters"]) == {"total_completed", "total_failed", "completed_by_kind",
                                     "failed_by_kind", "queue_depth"}
    first_proof(standin)
    body = wait_until(lambda: (b := standin.wait_ready())["allocations"]["pce"] and b)
    # the SRS and the PCE cuzk keeps cached after the first proof, both in the budget
    assert body["memory"]["used_bytes"] == 32 * MIB + 26 * MIB
    assert body["counters"]["total_completed"] == 1
    assert body["counters"]["completed_by_kind"] == {"porep-c2": 1}  # ProofKind's Display
    assert [a["circuit_id"] for a in body["allocations"]["srs"]] == ["porep-32g"]
    http, _ = standin.status("/metrics")
    assert http == 404
    http, _ = standin.status("/")
    assert http == 404


def test_srs_is_mmapped_at_the_first_proof_then_a_pce_file_is_written(standin: Standin) -> None:
    standin.make_params(mib=48)
    standin.start()
    standin.wait_ready()
    assert standin.sh(f"ls {PARAMS}")[1].split() == [POREP_PARAMS]
    standin.ok("sync; echo 1 > /proc/sys/vm/drop_caches || true")
    before = standin.memory_usage()
    make_c1(standin)
    code, out = standin.bench(PROVE)
    assert code == 0 and "status:    COMPLETED" in out, out
    log = standin.log()
    assert "loading SRS from disk" in log and f"path={PARAMS}/{POREP_PARAMS}" in log
    assert standin.pool_files()
    pce = wait_until(lambda: standin.sh(f"stat -c %s {PARAMS}/pce-porep-32g.bin")[1].strip()
                     if "PCE saved to disk" in standin.log() else None)
    assert int(pce) == 26 * MIB  # cuzk's 26 GiB at the lab's default scale of 1/1024
    assert standin.memory_usage() - before >= 32 * MIB  # the pool, plus page cache


PRELOAD = f"-a http://{LISTEN} preload -c"


def test_preload_loads_the_srs_once_through_the_budget(standin: Standin) -> None:
    """cuzk-bench preload (PreloadSRS, engine.rs preload_srs): the SRS loaded ahead of the
    first proof and charged to the budget; again: already loaded; the first proof then
    loads nothing more."""
    standin.make_params()
    standin.start()
    assert standin.wait_ready()["allocations"]["srs"] == []
    code, out = standin.bench(f"{PRELOAD} porep-32g")
    assert code == 0 and re.fullmatch(r"porep-32g loaded in \d+ ms", out.strip()), out
    body = standin.wait_ready()
    assert [a["circuit_id"] for a in body["allocations"]["srs"]] == ["porep-32g"]
    assert body["memory"]["used_bytes"] == 32 * MIB
    code, out = standin.bench(f"{PRELOAD} porep-32g")
    assert (code, out.strip()) == (0, "porep-32g already loaded")
    make_c1(standin)
    code, out = standin.bench(PROVE)
    assert code == 0 and "status:    COMPLETED" in out, out
    assert standin.log().count("loading SRS from disk") == 1


def test_preload_fails_as_cuzk_does(standin: Standin) -> None:
    """An unknown circuit, and a known one whose SRS file is not in the param cache: exit
    1 with cuzk-bench's error; a budget that cannot hold the SRS: the call never returns."""
    standin.make_params()
    standin.write_config({"pool_mib": 1024}, budget="512MiB")
    standin.ok(f"nohup /data/bin/cuzk-daemon -c {ZK}/cuzk.toml > {LOG} 2>&1 < /dev/null &")
    assert standin.wait_ready()["memory"]["total_bytes"] == 512 * MIB
    code, out = standin.bench(f"{PRELOAD} porep-1k")
    assert code == 1 and "PreloadSRS RPC failed" in out and "unknown circuit ID: porep-1k" in out
    code, out = standin.bench(f"{PRELOAD} wpost-32g")
    assert code == 1 and "SRS param file not found for WindowPost32G" in out, out
    code, out = standin.sh(f"timeout 3 /data/bin/cuzk-bench {PRELOAD} porep-32g")
    assert code == 124, out  # a budget of 512 MiB can never hold 1 GiB of SRS
    assert "acquire request exceeds total budget" in standin.log()


def test_missing_params_fail_every_proof_with_cuzks_message(standin: Standin) -> None:
    make_c1(standin)
    standin.start()
    standin.wait_ready()
    for _ in range(2):
        code, out = standin.bench(PROVE)
        assert code == 0 and "status:    FAILED" in out, out
        assert f"error:     SRS param file not found for Porep32G: {PARAMS}/{POREP_PARAMS}" in out
    assert standin.wait_ready()["counters"]["total_failed"] == 2
    assert not standin.pool_files()


def test_cuzks_defaults_unix_socket_no_status_port_missing_config(standin: Standin) -> None:
    standin.make_params()
    make_c1(standin)
    standin.ok("cd /data && nohup /data/bin/cuzk-daemon -c /data/zk/absent.toml "
               f"> {LOG} 2>&1 < /dev/null &")
    wait_until(lambda: standin.sh("test -S /run/curio/cuzk.sock")[0] == 0)
    assert "not found" not in standin.log()  # cuzk logs it before its logging starts
    assert standin.status()[0] == 0  # status_listen defaults to "": no status port
    code, out = standin.bench(f"-a unix:///run/curio/cuzk.sock single -t porep --c1 {C1}")
    assert code == 0 and "status:    COMPLETED" in out, out


def test_sizes_as_cuzk_reads_them(standin: Standin) -> None:
    standin.write_config(budget="1.5GiB")  # cuzk reads what it cannot parse as 50 GiB
    standin.ok(f"nohup /data/bin/cuzk-daemon -c {ZK}/cuzk.toml > {LOG} 2>&1 < /dev/null &")
    assert standin.wait_ready()["memory"]["total_bytes"] == 50 * 1024**3
    standin.cleanup()
    standin.ok(f"mkdir -p {ZK} && printf '[memory]\ntotal_budget = 536870912\n' > {ZK}/int.toml")
    code, out = standin.sh(f"/data/bin/cuzk-daemon -c {ZK}/int.toml")
    assert code == 1 and "failed to load config" in out and "expected a string" in out


def test_logs_are_coloured_unless_no_color(standin: Standin) -> None:
    standin.start()
    standin.wait_ready()
    assert "\x1b[32m INFO\x1b[0m" in standin.raw_log()
    standin.cleanup()
    standin.start(env={"NO_COLOR": "1"})
    standin.wait_ready()
    assert "\x1b[" not in standin.raw_log() and " INFO cuzk_daemon: " in standin.raw_log()


def test_refuses_to_run_on_a_host_that_is_not_a_lab_host(standin: Standin) -> None:
    standin.ok("mv /etc/rollout-lab-host /etc/rollout-lab-host.away")
    try:
        standin.start()
        assert standin.exit_rc() == 1
        assert "LAB STAND-IN" in standin.log() and "/etc/rollout-lab-host" in standin.log()
        assert standin.status()[0] == 0
    finally:
        standin.ok("mv /etc/rollout-lab-host.away /etc/rollout-lab-host")


def test_sigterm_kills_at_once_zombie_under_late_reaper_then_reaped(standin: Standin) -> None:
    standin.start(reaper_delay=3600)  # reaped when the test says so (SIGUSR1), not by a clock
    standin.wait_ready()
    pid = standin.wait_pid()
    standin.ok(f"kill -TERM {pid}")
    assert wait_until(lambda: standin.state(pid) == "Z")
    ps = standin.ok(f"ps -o stat=,args= -p {pid}")
    assert ps.startswith("Z") and "<defunct>" in ps
    assert standin.sh("pgrep -x cuzk-daemon")[0] == 0  # pgrep still "finds" the zombie
    standin.ok("pkill -USR1 -x lab-late-reaper")
    assert wait_until(lambda: standin.state(pid) is None)
    assert standin.exit_rc() == 143  # the reaper re-raised SIGTERM on itself
    assert "SIGTERM" not in standin.log()  # no handler, no cleanup, no last words


def test_memory_stays_charged_after_death_then_drains(standin: Standin) -> None:
    standin.make_params()
    baseline = standin.memory_usage()
    standin.start({"pool_mib": 96, "drain_mib_per_sec": 48})
    standin.wait_ready()
    first_proof(standin)
    loaded = standin.memory_usage()
    assert loaded - baseline >= 90 * MIB
    standin.ok(f"kill -KILL {standin.wait_pid()}")
    wait_until(lambda: standin.pid() is None, timeout=3)
    assert standin.memory_usage() - baseline >= 60 * MIB  # dead, but not released yet
    assert any(f.startswith("lab-srs-pool.") for f in standin.pool_files())
    wait_until(lambda: not standin.pool_files(), timeout=6)
    # what stays is page cache: the params read and the 26 MiB PCE file the proof wrote
    assert standin.memory_usage() - baseline < 24 * MIB + 26 * MIB
    assert "lab-pool-keeper" not in standin.sh("ps -eo comm")[1]


def test_sigint_leaves_a_prove_call_hanging_and_keeps_process_and_memory(
    standin: Standin,
) -> None:
    baseline = standin.memory_usage()
    standin.start()
    standin.wait_ready()
    first_proof(standin)
    pid = standin.wait_pid()
    standin.ok(f"kill -INT {pid}")
    wait_until(lambda: "received SIGINT, shutting down" in standin.log())
    assert standin.state(pid) in ("S", "R")
    http, body = standin.status()
    assert http == 200 and body  # the status port still answers
    # A bound is the only way to show that something never answers: 124 is timeout's.
    code, out = standin.sh(f"timeout 3 /data/bin/cuzk-bench {PROVE}")
    assert code == 124 and "=== Proof Result ===" not in out, out
    assert standin.memory_usage() - baseline >= 28 * MIB
    assert standin.pool_files()


def test_bench_prints_result_block_and_exit_codes(standin: Standin) -> None:
    standin.make_params()
    make_c1(standin)
    code, out = standin.bench(PROVE)
    assert code == 1 and "Error: failed to connect to daemon" in out  # nobody listening yet
    standin.start()
    standin.wait_ready()
    code, out = standin.bench(PROVE)
    assert code == 0, out
    assert "=== Proof Result ===" in out and "status:    COMPLETED" in out
    assert "submitting proof" in out  # its log lines go to stdout too
    first = re.search(r"^job_id:    (\S+)$", out, re.MULTILINE)
    code, out = standin.bench(PROVE.replace("porep --c1", "seal-commit --c1"))
    second = re.search(r"^job_id:    (\S+)$", out, re.MULTILINE)
    assert code == 0 and first and second and first.group(1) != second.group(1)
    code, out = standin.bench(f"-a {LISTEN} single -t porep --c1 {C1}")  # no scheme
    assert code == 1 and "invalid daemon address" in out
    code, out = standin.bench(f"-a http://{LISTEN} single -t porep --c1 {ZK}/missing.json")
    assert code == 1 and "Error: failed to read" in out and "os error 2" in out
    code, out = standin.bench(f"-a http://{LISTEN} single -t c2 --c1 {C1}")
    assert code == 1 and "unknown proof type: c2. Use: porep, snap, wpost, winning" in out
    code, out = standin.bench(f"-a http://{LISTEN} status")
    assert code == 0 and "=== cuzk daemon status ===" in out
    assert "proofs completed: 2" in out and "proofs failed:    0" in out


def test_fault_crash_at_start_panics_with_101(standin: Standin) -> None:
    standin.start({"fault": "crash_at_start"})
    assert standin.exit_rc() == 101
    assert "thread 'main' panicked at" in standin.log()
    assert standin.status()[0] == 0


def test_fault_die_after_is_a_silent_sigkill(standin: Standin) -> None:
    standin.start({"fault": "die_after", "die_after_secs": 1.0})
    standin.wait_ready()
    assert standin.exit_rc(timeout=5) == 137
    daemon_lines = [line for line in standin.log().splitlines() if "cuzk_daemon:" in line]
    assert daemon_lines[-1].endswith(f"ready, serving on {LISTEN}")  # and not a word more


def test_fault_clean_exit_logs_and_exits_0(standin: Standin) -> None:
    # States that stay observable, not the half second it serves: the exit code the
    # supervising shell records and the log. The exit comes only after serve() bound the
    # port (a failed bind exits 1), so exit 0 with the fault's line says it served.
    standin.start(env={"CUZK_LAB_FAULT": "clean_exit", "CUZK_LAB_DIE_AFTER_SECS": "0.5"})
    assert standin.exit_rc(timeout=60) == 0
    daemon_lines = [line for line in standin.log().splitlines() if "cuzk_daemon:" in line]
    assert daemon_lines[-2].endswith(f"ready, serving on {LISTEN}"), daemon_lines
    assert daemon_lines[-1].endswith("lab fault clean_exit: shutting down cleanly"), daemon_lines


def test_fault_oom_is_killed_by_the_cgroup(standin: Standin) -> None:
    before = standin.ok("grep -s oom_kill /sys/fs/cgroup/memory/memory.oom_control "
                        "/sys/fs/cgroup/memory.events || true")
    standin.start({"fault": "oom"})
    standin.wait_ready()
    assert standin.exit_rc(timeout=20) == 137
    after = standin.ok("grep -s oom_kill /sys/fs/cgroup/memory/memory.oom_control "
                       "/sys/fs/cgroup/memory.events || true")
    assert after != before
    lab.exec_on(standin.host, "true")  # the host survived its daemon's OOM kill


def test_fault_fail_validation_from_env_over_config(standin: Standin) -> None:
    standin.make_params()
    make_c1(standin)
    standin.start({"fault": "none"}, env={"CUZK_LAB_FAULT": "fail_validation"})
    standin.wait_ready()
    code, out = standin.bench(PROVE)
    assert code == 0 and "status:    FAILED" in out and "error:     proof verification" in out
    http, body = standin.status()
    assert body and body["counters"]["total_failed"] == 1


def test_fault_ignore_sigterm(standin: Standin) -> None:
    standin.start({"fault": "ignore_sigterm"})
    standin.wait_ready()
    pid = standin.wait_pid()
    standin.ok(f"kill -TERM {pid}")
    wait_until(lambda: "ignoring SIGTERM" in standin.log())  # handled: now it must live on
    assert standin.state(pid) in ("S", "R")


def test_fault_gpu_shows_at_the_first_proof_not_at_start(standin: Standin) -> None:
    standin.make_params()
    make_c1(standin)
    standin.start({"fault": "gpu_fault"})
    assert standin.wait_ready()["counters"]["total_failed"] == 0  # it starts like any other
    code, out = standin.bench(PROVE)
    assert code == 0 and "status:    FAILED" in out and "CUDA error" in out, out
    assert "partition 0 GPU prove failed: CUDA error" in out, out  # cuzk's words
    assert "CUDA error" in standin.log()
    status = standin.status()[1] or {}  # as cuzk leaves it: the job in pipelines for good
    assert len(status["pipelines"]) == 1 and status["counters"]["total_failed"] == 0, status


def test_fault_never_release_keeps_the_pool(standin: Standin) -> None:
    baseline = standin.memory_usage()
    standin.start({"fault": "never_release", "drain_mib_per_sec": 256})
    standin.wait_ready()
    first_proof(standin)
    standin.ok(f"kill -KILL {standin.wait_pid()}")
    wait_until(lambda: standin.pid() is None)
    # The keeper saw the daemon die and left without releasing anything: nothing else ever
    # will (a releasing keeper only leaves once the pool file is gone).
    wait_until(lambda: "lab-pool-keeper" not in standin.sh("ps -eo comm")[1])
    assert standin.pool_files()
    assert standin.memory_usage() - baseline >= 28 * MIB


def test_baked_fault_is_the_default_and_overridable(
    standin: Standin, docker_client: docker.DockerClient
) -> None:
    tag = lab.build_prover_image(docker_client, f"{lab.lab_prefix()}/prover:test-bad", "bad-1",
                                 "fail_validation")
    try:
        standin.install(extract_standin(docker_client, tag))
    finally:
        docker_client.images.remove(tag, force=True)
    assert 'BUILD_VERSION = "bad-1"' in standin.ok("cat /data/bin/cuzk-daemon")
    standin.make_params()
    make_c1(standin)
    standin.start()
    standin.wait_ready()
    assert "status:    FAILED" in standin.bench(PROVE)[1]
    standin.cleanup()
    standin.make_params()
    make_c1(standin)
    standin.start({"fault": "none"})  # config overrides the baked fault
    standin.wait_ready()
    assert "status:    COMPLETED" in standin.bench(PROVE)[1]
