"""The stand-in cuzk behaves like the real one where a rollout can tell the difference."""

from __future__ import annotations

import json
import re
import time

import docker
import pytest

from rollout import lab

from .conftest import LISTEN, LOG, PROVER_VERSION, STATUS, ZK, Standin, extract_standin

pytestmark = pytest.mark.lab
MIB = 1 << 20
C1 = f"{ZK}/c1.json"


def wait_until(predicate, timeout: float = 10.0, step: float = 0.1):  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(step)
    raise AssertionError("condition not met in time")


def make_c1(s: Standin) -> None:
    s.ok(f"mkdir -p {ZK} && echo '{{\"c1\": \"lab\"}}' > {C1}")


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
        socket.create_connection(("127.0.0.1", 9821), timeout=0.2).close()
        port_at = time.monotonic() - t0
    except OSError:
        time.sleep(0.01)
print(json.dumps({"line_at": line_at, "port_at": port_at}))
"""


def test_version_is_stamped_at_build(standin: Standin) -> None:
    assert standin.ok("/data/bin/cuzk-daemon --version").strip() == f"cuzk-daemon {PROVER_VERSION}"
    assert standin.ok("/data/bin/cuzk-bench --version").strip() == f"cuzk-bench {PROVER_VERSION}"


def test_ready_only_after_load_and_line_before_bind(standin: Standin) -> None:
    standin.write_config({"load_secs": 1.5, "bind_delay_secs": 0.4})
    probe = READINESS_PROBE % {"config": f"{ZK}/cuzk.toml", "log": LOG}
    timing = json.loads(standin.ok(f"python3 -c '{probe}'").strip().splitlines()[-1])
    assert timing["port_at"] is not None, standin.log()
    assert timing["port_at"] >= 1.5
    assert timing["line_at"] is not None and timing["line_at"] < timing["port_at"]


def test_status_fields_and_404(standin: Standin) -> None:
    standin.start()
    body = standin.wait_ready()
    assert body["version"] == PROVER_VERSION
    assert isinstance(body["uptime_secs"], int)
    assert set(body["memory"]) >= {"total_bytes", "used_bytes", "available_bytes"}
    assert body["memory"]["used_bytes"] == 32 * MIB
    assert set(body["counters"]) >= {"total_completed", "total_failed"}
    http, _ = standin.status("/metrics")
    assert http == 404
    http, _ = standin.status("/")
    assert http == 404


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
    baseline = standin.memory_usage()
    standin.start({"pool_mib": 96, "drain_mib_per_sec": 48})
    standin.wait_ready()
    loaded = standin.memory_usage()
    assert loaded - baseline >= 90 * MIB
    standin.ok(f"kill -KILL {standin.wait_pid()}")
    wait_until(lambda: standin.pid() is None, timeout=3)
    assert standin.memory_usage() - baseline >= 60 * MIB  # dead, but not released yet
    assert any(f.startswith("lab-srs-pool.") for f in standin.pool_files())
    wait_until(lambda: not standin.pool_files(), timeout=6)
    assert standin.memory_usage() - baseline < 24 * MIB
    assert "lab-pool-keeper" not in standin.sh("ps -eo comm")[1]


def test_sigint_stops_work_but_keeps_process_and_memory(standin: Standin) -> None:
    baseline = standin.memory_usage()
    standin.start()
    standin.wait_ready()
    pid = standin.wait_pid()
    standin.ok(f"kill -INT {pid}")
    wait_until(lambda: "received SIGINT" in standin.log())  # handled: now it must live on
    assert standin.state(pid) in ("S", "R")
    http, body = standin.status()
    assert http == 200 and body and body["accepting_work"] is False
    make_c1(standin)
    code, out = standin.bench(f"-a http://{LISTEN} single -t porep --c1 {C1}")
    assert code == 0 and "status:    FAILED" in out and "not accepting" in out
    assert standin.memory_usage() - baseline >= 28 * MIB
    assert standin.pool_files()


def test_bench_prints_result_block_and_exit_codes(standin: Standin) -> None:
    make_c1(standin)
    code, out = standin.bench(f"-a http://{LISTEN} single -t porep --c1 {C1}")
    assert code != 0 and "failed to connect" in out  # nobody listening yet
    standin.start()
    standin.wait_ready()
    code, out = standin.bench(f"-a http://{LISTEN} single -t porep --c1 {C1}")
    assert code == 0, out
    assert out.splitlines()[0] == "=== Proof Result ==="
    assert "status:    COMPLETED" in out
    first = re.search(r"^job_id:    (\S+)$", out, re.MULTILINE)
    code, out = standin.bench(f"-a {LISTEN} single -t porep --c1 {C1}")  # no scheme
    second = re.search(r"^job_id:    (\S+)$", out, re.MULTILINE)
    assert code == 0 and first and second and first.group(1) != second.group(1)
    code, out = standin.bench(f"-a {LISTEN} single -t porep --c1 {ZK}/missing.json")
    assert code == 0 and "status:    FAILED" in out
    assert re.search(r"^error:     .*missing\.json", out, re.MULTILINE)
    for _ in range(2):
        code, out = standin.bench(f"-a {LISTEN} single -t porep --c1 {C1} --job-id fixed-1")
    assert code == 0 and "status:    FAILED" in out and "already exists" in out
    code, out = standin.bench(f"-a {LISTEN} status")
    assert code == 0 and "=== Daemon Status ===" in out and f"version:   {PROVER_VERSION}" in out
    assert "completed: 3" in out and "failed:    1" in out  # a missing c1 never reaches it


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
    assert daemon_lines[-1].endswith(f"(status on {STATUS})")


def test_fault_clean_exit_logs_and_exits_0(standin: Standin) -> None:
    standin.start(env={"CUZK_LAB_FAULT": "clean_exit", "CUZK_LAB_DIE_AFTER_SECS": "0.5"})
    standin.wait_ready()
    assert standin.exit_rc(timeout=5) == 0
    assert "clean_exit" in standin.log()


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
    make_c1(standin)
    standin.start({"fault": "none"}, env={"CUZK_LAB_FAULT": "fail_validation"})
    standin.wait_ready()
    code, out = standin.bench(f"-a {LISTEN} single -t porep --c1 {C1}")
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


def test_fault_never_release_keeps_the_pool(standin: Standin) -> None:
    baseline = standin.memory_usage()
    standin.start({"fault": "never_release", "drain_mib_per_sec": 256})
    standin.wait_ready()
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
    make_c1(standin)
    standin.start()
    assert standin.wait_ready()["version"] == "bad-1"
    assert "status:    FAILED" in standin.bench(f"-a {LISTEN} single -t porep --c1 {C1}")[1]
    standin.cleanup()
    make_c1(standin)
    standin.start({"fault": "none"})  # config overrides the baked fault
    standin.wait_ready()
    assert "status:    COMPLETED" in standin.bench(f"-a {LISTEN} single -t porep --c1 {C1}")[1]
