"""Hosts as they really are (issue 12): a stranger on the daemon's status port. Ready must
prove whose answer it got, and a rollback proves it the same way. Runs park at known
points (failpoints): the test acts there, waiting on events, never on time."""

from __future__ import annotations

import shlex
from pathlib import Path

import pytest

from .conftest import LabFleet
from .rollout_helpers import (
    assert_serving,
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
    work = tmp_path_factory.mktemp("base")
    first = run_cli(work, *rollout_args(lab_fleet.fleet_path, "base"), *FAST,
                    "--set", f"lab_knobs={{{KNOBS}}}")
    assert first.code == 0, first.stderr[-3000:]
    return lab_fleet


def start_stranger(host: str) -> int:
    """Bind the stranger (setsid nohup, nobody's child) and wait until it answers."""
    sh(host, "rm -f /tmp/stranger.pid; printf '%s' " + shlex.quote(STRANGER)
       + " > /tmp/stranger.py; setsid nohup python3 /tmp/stranger.py >/dev/null 2>&1 &"
       " for i in $(seq 300); do [ -s /tmp/stranger.pid ] && "
       "curl -fsS http://127.0.0.1:9821/status >/dev/null && exit 0; sleep 0.1; done; exit 1")
    return int(sh(host, "cat /tmp/stranger.pid"))


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
        stranger = start_stranger(HOST)
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
