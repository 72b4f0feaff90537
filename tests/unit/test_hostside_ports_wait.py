"""ports.py --wait, run here as a host runs it: the ready step's wait for the daemon's ports,
polled in one process, then their owners."""

from __future__ import annotations

import http.server
import json
import os
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from rollout.host.scripts import script_text
from rollout.host.scripts.ports import MARK


class Status(http.server.BaseHTTPRequestHandler):
    code = 200

    def do_GET(self) -> None:  # noqa: N802 - the http.server name
        body = json.dumps({"uptime_secs": 1.5}).encode()
        self.send_response(self.code)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


class Failing(Status):
    code = 503


def _serve(handler: type[Status]) -> Iterator[int]:
    server = http.server.HTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield server.server_address[1]
    server.shutdown()
    server.server_close()


@pytest.fixture
def status_port() -> Iterator[int]:
    yield from _serve(Status)


@pytest.fixture
def failing_status_port() -> Iterator[int]:
    yield from _serve(Failing)


@pytest.fixture
def grpc_port() -> Iterator[int]:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen(8)
        yield s.getsockname()[1]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait(grpc: int, status: int, *extra: str, seconds: float = 20
         ) -> subprocess.CompletedProcess[str]:
    args = ["--wait", str(seconds), "--grpc-url", f"http://127.0.0.1:{grpc}/",
            "--status-url", f"http://127.0.0.1:{status}/status", "--port", str(status), *extra]
    return subprocess.run([sys.executable, "-", *args], input=script_text("ports"),
                          capture_output=True, text=True, timeout=60)


def test_both_ports_answer_then_their_owners(grpc_port: int, status_port: int) -> None:
    p = wait(grpc_port, status_port, "--watch", str(os.getpid()))
    assert p.returncode == 0, p.stderr
    answer, mark, owners = p.stdout.rpartition(f"\n{MARK}\n")
    assert mark and json.loads(answer) == {"uptime_secs": 1.5}
    assert str(status_port) in json.loads(owners)["ports"]


def test_grpc_port_not_bound_is_not_ready(status_port: int) -> None:
    p = wait(_free_port(), status_port, seconds=0.5)
    assert p.returncode == 1 and MARK not in p.stdout


def test_status_port_answering_an_error_is_not_ready(grpc_port: int,
                                                     failing_status_port: int) -> None:
    p = wait(grpc_port, failing_status_port, seconds=0.5)
    assert p.returncode == 1 and MARK not in p.stdout


def test_daemon_that_died_ends_the_wait() -> None:
    dead = subprocess.Popen(["true"])
    dead.wait()
    p = wait(_free_port(), _free_port(), "--watch", str(dead.pid), seconds=60)
    assert p.returncode == 3
    assert p.stdout.strip() == f"daemon {dead.pid} died during start-up"


def test_pid_read_from_the_pidfile_as_hostile_text(tmp_path: Path, grpc_port: int) -> None:
    pidfile = tmp_path / "daemon.pid"
    pidfile.write_text("$(reboot) 1 /x\n")  # not a pid: nothing watched, the wait runs out
    p = wait(grpc_port, _free_port(), "--pidfile", str(pidfile), seconds=0.5)
    assert p.returncode == 1
