"""Hosts as they really are (issue 12): a stranger on the daemon's status port. Ready must
prove whose answer it got, and a rollback proves it the same way. Runs park at known
points (failpoints): the test acts there, waiting on events, never on time."""

from __future__ import annotations

import io
import json
import shlex
import tarfile
from pathlib import Path

import docker
import pytest

from rollout import lab
from rollout.host.scripts import script_text

from .conftest import LabFleet
from .rollout_helpers import (
    assert_serving,
    inventory_with,
    reset_host,
    rollout_args,
    run_cli,
    sh,
    start_cli,
)

pytestmark = pytest.mark.lab
HOST = "lab-2"
KNOBS = "pool_mib: 32, load_secs: 0.3, drain_mib_per_sec: 256, prove_secs: 0.1"
FAST = ("--limit", HOST, "--set", "ready_timeout=15", "--set", "stop_grace=3",
        "--set", "drain_deadline=30")
# A stranger that answers /status like a daemon up for a long time, on the daemon's port.
STRANGER = r"""
import json, os
from http.server import BaseHTTPRequestHandler, HTTPServer
class H(BaseHTTPRequestHandler):
    def do_GET(self):
        body = json.dumps({"uptime_secs": 5000.0, "counters": {}}).encode()
        self.send_response(200); self.send_header("Content-Length", str(len(body)))
        self.end_headers(); self.wfile.write(body)
    def log_message(self, *a): pass
server = HTTPServer(("0.0.0.0", 9821), H)
open("/tmp/stranger.pid.new", "w").write(str(os.getpid()))
os.rename("/tmp/stranger.pid.new", "/tmp/stranger.pid")
server.serve_forever()
"""


@pytest.fixture(scope="module")
def fleet(lab_fleet: LabFleet, tmp_path_factory: pytest.TempPathFactory) -> LabFleet:
    reset_host(HOST)
    base_deploy(lab_fleet, tmp_path_factory.mktemp("base"))
    return lab_fleet


def start_stranger(host: str, port: int = 9821) -> int:
    """Bind the stranger (setsid nohup, nobody's child) and wait until it answers."""
    script = STRANGER.replace("9821", str(port))
    sh(host, "rm -f /tmp/stranger.pid; printf '%s' " + shlex.quote(script)
       + " > /tmp/stranger.py; setsid nohup python3 /tmp/stranger.py >/dev/null 2>&1 &"
       " for i in $(seq 300); do [ -s /tmp/stranger.pid ] && "
       f"curl -fsS http://127.0.0.1:{port}/status >/dev/null && exit 0; sleep 0.1; done; exit 1")
    return int(sh(host, "cat /tmp/stranger.pid"))


def base_deploy(fleet: LabFleet, work: Path) -> None:
    work.mkdir(exist_ok=True)
    first = run_cli(work, *rollout_args(fleet.fleet_path, "base"), *FAST,
                    "--set", f"lab_knobs={{{KNOBS}}}")
    assert first.code == 0, first.stderr[-3000:]


def hand_started(host: str) -> int:
    """Kill rollout's supervisor and daemon and forget them (no pidfiles), then start the
    release's daemon by hand as the field's scripts do: setsid nohup, nobody's child."""
    sh(host, "pkill -KILL -f '[s]upervisor.py'; pkill -KILL -x cuzk-daemon; "
       "while pgrep -x cuzk-daemon >/dev/null; do sleep 0.1; done; rm -rf /data/rollout; "
       "setsid nohup $(readlink -f /data/current)/cuzk-daemon -c /data/zk/cuzk.toml "
       ">/tmp/cuzk-daemon.log 2>&1 < /dev/null & "
       "for i in $(seq 300); do curl -fsS http://127.0.0.1:9821/status >/dev/null && exit 0; "
       "sleep 0.1; done; exit 1")
    return int(sh(host, "pgrep -x cuzk-daemon"))


def cuzk_pids(host: str) -> list[int]:
    return [int(p) for p in sh(host, "pgrep -x cuzk-daemon; true").split()]


def process_start(host: str, pid: int) -> str:
    return sh(host, f"cut -d')' -f2 /proc/{pid}/stat").split()[19]


def test_hand_started_daemon_without_adopt_is_refused_at_preflight_untouched(
    fleet: LabFleet, tmp_path: Path
) -> None:
    pid = hand_started(HOST)
    started = process_start(HOST, pid)
    run = run_cli(tmp_path, *rollout_args(fleet.fleet_path, "hand2"), *FAST,
                  "--set", f"lab_knobs={{{KNOBS}}}")
    end = run.host_end(HOST)
    assert run.code == 1 and "preflight failed" in end["reason"], end
    assert f"pid {pid} " in end["reason"] and "--adopt" in end["reason"], end
    assert "9821" in end["reason"] and "cuzk-daemon -c /data/zk/cuzk.toml" in end["reason"]
    assert cuzk_pids(HOST) == [pid] and process_start(HOST, pid) == started
    assert json.loads(sh(HOST, "curl -fsS http://127.0.0.1:9821/status"))["uptime_secs"] > 0
    assert json.loads(sh(HOST, "cat /data/current/RELEASE.json"))["version"] == "base"
    sh(HOST, f"kill -KILL {pid}; while pgrep -x cuzk-daemon >/dev/null; do sleep 0.1; done")
    base_deploy(fleet, tmp_path / "again")  # leave the host as the module found it


def test_stranger_on_the_status_port_before_the_run_is_refused_at_preflight(
    fleet: LabFleet, tmp_path: Path
) -> None:
    sh(HOST, "pkill -KILL -f '[s]upervisor.py'; pkill -KILL -x cuzk-daemon; "
       "while pgrep -x cuzk-daemon >/dev/null; do sleep 0.1; done; true")
    stranger = start_stranger(HOST)
    try:
        run = run_cli(tmp_path, *rollout_args(fleet.fleet_path, "base"), *FAST,
                      "--set", f"lab_knobs={{{KNOBS}}}")
        end = run.host_end(HOST)
        assert run.code == 1 and "preflight failed" in end["reason"], end
        assert f"port 9821 is held by pid {stranger} " in end["reason"], end
        assert cuzk_pids(HOST) == [], "a daemon was started next to the stranger"
    finally:
        sh(HOST, f"kill {stranger}; while kill -0 {stranger} 2>/dev/null; do sleep 0.1; done")
    base_deploy(fleet, tmp_path / "again")


def parked_at(name: str) -> object:
    return lambda e: e["kind"] == "parked" and name in e["reason"]


def test_stranger_bound_after_start_fails_ready_and_the_host_rolls_back(
    fleet: LabFleet, tmp_path: Path
) -> None:
    park = tmp_path / "park"
    park.mkdir()
    env = {"ROLLOUT_FAILPOINTS": "park-after-start@controller,park-before-rollback@controller",
           "ROLLOUT_PARK_DIR": str(park)}
    late = f"lab_knobs={{{KNOBS}, bind_delay_secs: 600}}"  # the new daemon binds late
    run = start_cli(tmp_path, *rollout_args(fleet.fleet_path, "late-bind"), *FAST,
                    "--set", late, env=env)
    stranger = None
    try:
        run.wait_for(parked_at("park-after-start"), timeout=300)
        # Like cuzk, the daemon binds its status port at once and its gRPC port late.
        stranger = start_stranger(HOST, 9820)
        (park / "park-after-start.go").touch()
        run.wait_for(parked_at("park-before-rollback"), timeout=120)
        ready = next(e for e in run.events() if e["kind"] == "step_end"
                     and e["host"] == HOST and e["step"] == "ready")
        assert ready["status"] == "failed", ready
        assert f"port answered by pid {stranger} (not the started daemon)" in ready["reason"]
        sh(HOST, f"kill {stranger}")
        stranger = None
        (park / "park-before-rollback.go").touch()
        result = run.finish()
    finally:
        if stranger is not None:
            sh(HOST, f"kill {stranger}; true")
        for name in ("park-after-start", "park-before-rollback"):
            (park / f"{name}.go").touch()
    end = result.host_end(HOST)
    assert result.code == 1 and end["status"] == "rolled_back", end
    assert "port answered by pid" in end["reason"], end
    rollback_ready = next(e for e in result.events if e["kind"] == "step_end"
                          and e["host"] == HOST and e["step"] == "rollback-ready")
    assert "held by daemon" in rollback_ready["reason"], rollback_ready
    assert_serving(HOST)


def put_file(host: str, path: str, data: bytes) -> None:
    """A file on a lab host, through Docker's archive API (any size)."""
    folder, _, name = path.rpartition("/")
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        info = tarfile.TarInfo(name)
        info.size, info.mode = len(data), 0o644
        tar.addfile(info, io.BytesIO(data))
    container = docker.from_env().containers.get(f"{lab.lab_prefix()}-{host}")
    container.put_archive(folder or "/", buf.getvalue())


def test_hand_started_daemon_with_adopt_is_replaced_by_the_supervisors(
    fleet: LabFleet, tmp_path: Path
) -> None:
    hand = hand_started(HOST)
    run = run_cli(tmp_path, *rollout_args(fleet.fleet_path, "adopted"), *FAST,
                  "--set", f"lab_knobs={{{KNOBS}}}", "--adopt")
    end = run.host_end(HOST)
    assert run.code == 0 and end["status"] == "validated", (end, run.stderr[-2000:])
    stop = run.steps(HOST)["stop"]
    assert f"adopted and stopped daemon(s) {hand}" in stop["reason"], stop
    assert assert_serving(HOST) == "adopted"
    [pid] = cuzk_pids(HOST)
    supervisor = int(sh(HOST, "cut -d' ' -f1 /data/rollout/supervisor.pid"))
    assert sh(HOST, f"cut -d')' -f2 /proc/{pid}/stat").split()[1] == str(supervisor)
    put_file(HOST, "/tmp/ops.py", script_text("ops").encode())  # over ARG_MAX as an argument
    kwargs = shlex.quote(json.dumps({"ports": [9820, 9821]}))
    owners = json.loads(sh(HOST, f"python3 /tmp/ops.py --call owners --kwargs {kwargs}"))["ports"]
    assert {o["pid"] for port in ("9820", "9821") for o in owners[port]} == {pid}
    exits = [json.loads(x) for x in sh(HOST, "cat /data/rollout/exits.jsonl").splitlines()]
    assert any(e.get("adopted") and e["pid"] == hand for e in exits), exits


KILL_TREE = ("kill -9 $(for d in /proc/[0-9]*; do p=${d#/proc/}; "
             "[ \"$p\" = 1 ] || [ \"$p\" = $$ ] || [ \"$(cat $d/comm 2>/dev/null)\" = sshd ] "
             "|| echo $p; done) 2>/dev/null; true")


def test_whole_tree_kill_shows_dead_and_diagnose_names_external_sigkill(
    fleet: LabFleet, tmp_path: Path
) -> None:
    serving = assert_serving(HOST)
    sh(HOST, "test -s /data/rollout/supervisor.json")  # a heartbeat was written
    sh(HOST, KILL_TREE)
    sh(HOST, "while pgrep -x cuzk-daemon >/dev/null || pgrep -f '[s]upervisor.py' >/dev/null;"
       " do sleep 0.1; done")
    hosts = ("--hosts", str(fleet.fleet_path), "--limit", HOST)
    status = run_cli(tmp_path, "status", *hosts, "--json")
    [row] = json.loads(status.stdout)["hosts"]
    assert row["state"] == "dead" and row["supervisor"] == "dead", row
    diag = run_cli(tmp_path, "diagnose", "--hosts", str(fleet.fleet_path), "--host", HOST,
                   "--json")
    verdict = json.loads(diag.stdout)
    verdict = verdict[0]["verdict"] if isinstance(verdict, list) else verdict["verdict"]
    assert verdict["cause"] == "external-sigkill", verdict
    assert "(supervisor killed too)" in verdict["summary"], verdict
    assert any("last heartbeat" in e for e in verdict["evidence"]), verdict
    healed = run_cli(tmp_path, "heal", *hosts)
    assert healed.code == 0, healed.stdout + healed.stderr
    assert assert_serving(HOST) == serving  # the same release, back
    again = run_cli(tmp_path, "heal", *hosts)  # idempotent: nothing to do the second time
    assert again.code == 0 and "healthy" in again.stdout, again.stdout


def test_container_restart_brings_the_supervisor_back_through_the_on_start_script(
    fleet: LabFleet, tmp_path: Path, docker_client: docker.DockerClient
) -> None:
    serving = assert_serving(HOST)
    fleet_file = inventory_with(tmp_path, fleet.fleet_path, HOST,
                                "onstart_script: /root/onstart.sh")
    hosts = ("--hosts", str(fleet_file), "--limit", HOST)
    run = run_cli(tmp_path, *rollout_args(fleet_file, serving), *FAST,
                  "--set", f"lab_knobs={{{KNOBS}}}")
    assert run.code == 0, run.stderr[-2000:]
    assert "on-start script /root/onstart.sh" in run.steps(HOST)["supervise"]["reason"]
    [row] = json.loads(run_cli(tmp_path, "status", *hosts, "--json").stdout)["hosts"]
    assert "on-start script" in row["supervisor_registered"], row
    docker_client.containers.get(f"{lab.lab_prefix()}-{HOST}").restart()
    sh(HOST, "for i in $(seq 600); do pgrep -f '[s]upervisor.py' >/dev/null && "
       "curl -fsS http://127.0.0.1:9821/status >/dev/null && exit 0; sleep 0.1; done; exit 1")
    assert assert_serving(HOST) == serving
    sh(HOST, "rm -f /root/onstart.sh")


# The field's entrypoint.sh: a sidecar, and a loop that respawns cuzk whenever it ends.
ENTRYPOINT = """#!/bin/sh
python3 -c 'import time; time.sleep(86400)' curio-sidecar &
while true; do
  $(readlink -f /data/current)/cuzk-daemon -c /data/zk/cuzk.toml >>/tmp/cuzk-daemon.log 2>&1
  sleep 0.2
done
"""


def test_adopt_reports_a_respawning_loop_and_succeeds_after_the_hand_over(
    fleet: LabFleet, tmp_path: Path
) -> None:
    hand_started(HOST)
    sh(HOST, "pkill -KILL -x cuzk-daemon; while pgrep -x cuzk-daemon >/dev/null; do sleep 0.1;"
       " done; printf '%s' " + shlex.quote(ENTRYPOINT) + " > /root/entrypoint.sh; "
       "setsid nohup sh /root/entrypoint.sh >/dev/null 2>&1 < /dev/null & "
       "for i in $(seq 300); do curl -fsS http://127.0.0.1:9821/status >/dev/null && exit 0; "
       "sleep 0.1; done; exit 1")
    loop = int(sh(HOST, "pgrep -f '^sh /root/entrypoint.sh'"))
    sidecar = int(sh(HOST, "pgrep -f '[c]urio-sidecar'"))
    args = (*rollout_args(fleet.fleet_path, "handover"), *FAST,
            "--set", f"lab_knobs={{{KNOBS}}}", "--adopt")
    run = run_cli(tmp_path, *args)
    end = run.host_end(HOST)  # found at preflight by its parent chain (issue 17), not stopped
    assert run.code == 1 and f"is started by pid {loop}" in end["reason"], end
    assert "entrypoint.sh" in end["reason"] and "stop" not in run.steps(HOST), end
    assert len(cuzk_pids(HOST)) == 1  # the respawned daemon serves, alone
    sh(HOST, "for i in $(seq 300); do curl -fsS http://127.0.0.1:9821/status >/dev/null && "
       "exit 0; sleep 0.1; done; exit 1")  # and answers, once bound
    # the hand-over (docs/adopt.md): the loop stops starting cuzk; the sidecar keeps running
    sh(HOST, f"kill {loop}; while kill -0 {loop} 2>/dev/null; do sleep 0.1; done")
    (tmp_path / "again").mkdir()
    again = run_cli(tmp_path / "again", *args)
    assert again.code == 0, again.stderr[-2000:]
    assert again.host_end(HOST)["status"] == "validated"
    assert assert_serving(HOST) == "handover" and len(cuzk_pids(HOST)) == 1
    sh(HOST, f"kill -0 {sidecar}")  # the sidecar still runs
    sh(HOST, f"kill {sidecar}; rm -f /root/entrypoint.sh")
