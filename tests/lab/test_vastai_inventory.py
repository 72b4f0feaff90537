"""A vast.ai fleet as the inventory, end to end on the lab: the real vastai package asks
a local stand-in of the API (VAST_URL, the package's own setting) for the instances, and
`rollout status` / `rollout rollout` reach the lab hosts it names, by proxy address or by
the direct 22/tcp mapping."""

from __future__ import annotations

import contextlib
import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from rollout.config.playbook import LAB_PLAYBOOK

from .conftest import LabFleet
from .rollout_helpers import FAST_KNOBS, assert_serving, reset_host, run_cli

pytestmark = pytest.mark.lab
pytest.importorskip("vastai")
KEY = "lab-vast-key-5b1d0c7e"


def instance(index: int, name: str, port: int, status: str = "running") -> dict[str, Any]:
    """One row as GET /api/v1/instances/ answers it (the fields rollout reads, and a few)."""
    return {
        "id": 41000000 + index, "label": name, "actual_status": status,
        "intended_status": "running", "cur_state": "running", "image_runtype": "ssh",
        "ssh_host": "127.0.0.1", "ssh_port": port, "ssh_idx": "0",
        "public_ipaddr": "127.0.0.1",
        "ports": {"22/tcp": [{"HostIp": "0.0.0.0", "HostPort": str(port)}]},
        "num_gpus": 1, "gpu_name": "RTX 4090", "start_date": 1764550000.0,
        "extra_env": [], "machine_id": 7000 + index,
    }


@contextlib.contextmanager
def serve_api(rows: list[dict[str, Any]]) -> Iterator[tuple[str, list[str]]]:
    """A local API answering GET /api/v1/instances/ with these rows: its URL, and the
    Authorization headers it was sent."""
    body = json.dumps({"instances": rows, "next_token": None,
                       "total_instances": len(rows)}).encode()
    seen: list[str] = []

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 (http.server's name)
            seen.append(self.headers.get("Authorization", ""))
            ok = self.path.startswith("/api/v1/instances/?")
            self.send_response(200 if ok else 404)
            self.send_header("Content-Type", "application/json")
            self.end_headers()
            self.wfile.write(body if ok else b"{}")

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", seen
    finally:
        server.shutdown()
        thread.join(timeout=10)


@pytest.fixture
def vast_api(lab_fleet: LabFleet) -> Iterator[tuple[str, list[str]]]:
    """The lab hosts as instances (and one stopped)."""
    rows = [instance(i, h.name, h.port) for i, h in enumerate(lab_fleet.hosts)]
    rows.append(instance(99, "lab-stopped", 1, status="exited"))
    with serve_api(rows) as api:
        yield api


def vast_fleet_yaml(lab_fleet: LabFleet, tmp_path: Path, address: str) -> Path:
    lab_dir = lab_fleet.fleet_path.parent
    path = tmp_path / "vast.yaml"
    path.write_text(
        f"playbook: {LAB_PLAYBOOK}\n"
        f"defaults:\n  key_file: {lab_dir / 'keys' / 'id_ed25519'}\n"
        f"  known_hosts: {lab_dir / 'known_hosts'}\n  host_key_policy: strict\n"
        "  vars: {memory_limit: 512m}\n"
        f"vastai:\n  label: 'lab-*'\n  address: {address}\n  groups: [lab]\n"
    )
    return path


def test_status_and_a_rollout_on_a_vastai_fleet(lab_fleet: LabFleet, tmp_path: Path,
                                                vast_api: tuple[str, list[str]]) -> None:
    url, seen = vast_api
    env = {"VAST_URL": url, "VAST_API_KEY": KEY}
    names = [h.name for h in lab_fleet.hosts]
    status = run_cli(tmp_path, "status", "--json", "--hosts",
                     str(vast_fleet_yaml(lab_fleet, tmp_path, "proxy")), env=env)
    assert status.code in (0, 1), status.stderr[-3000:]
    rows = json.loads(status.stdout)
    listed = rows["hosts"] if isinstance(rows, dict) else rows
    assert sorted(r["host"] for r in listed) == sorted(names)
    assert all(r["state"] != "unreachable" for r in listed), listed
    assert "warning: skipped lab-stopped (instance 41000099): not running" in status.stderr
    assert seen and all(h == f"Bearer {KEY}" for h in seen)
    assert KEY not in status.stdout + status.stderr

    first = names[0]
    reset_host(first)
    run = run_cli(tmp_path, "rollout", "--hosts",
                  str(vast_fleet_yaml(lab_fleet, tmp_path, "direct")),
                  "--limit", first, "--set", "version=vast-1",
                  "--set", f"lab_knobs={FAST_KNOBS}", env=env)
    assert run.code == 0, run.stderr[-3000:]
    assert run.host_end(first)["status"] == "validated"
    assert assert_serving(first) == "vast-1"
