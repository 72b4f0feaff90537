"""Errors in the operator's words, caused for real on the lab (issue 29): a wrong port, a key
file that is missing, a user the host refuses, an unknown and a changed host key. Each host's
reason names its kind and fix, and no library text."""

from __future__ import annotations

import json
import socket
from pathlib import Path

import pytest

from .conftest import LabFleet
from .rollout_helpers import run_cli

pytestmark = pytest.mark.lab

LIBRARY_TEXT = ("Errno", "HTTPConnectionPool", "No existing session", "<class", "object at 0x")


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_each_connection_failure_in_the_operators_words(lab_fleet: LabFleet,
                                                         tmp_path: Path) -> None:
    lab = lab_fleet.fleet_path.parent
    port, wrong = lab_fleet.hosts[0].port, closed_port()
    known = (lab / "known_hosts").read_text()
    (tmp_path / "empty").write_text("")
    line = next(x for x in known.splitlines() if x.startswith(f"[127.0.0.1]:{port} "))
    other = next(x for x in known.splitlines() if not x.startswith(f"[127.0.0.1]:{port} "))
    (tmp_path / "changed").write_text(f"[127.0.0.1]:{port} {other.split(' ', 1)[1]}\n")
    assert line  # the host's own key line exists, so "changed" really differs
    (tmp_path / "fleet.yaml").write_text(f"""\
defaults: {{user: root, key_file: {lab}/keys/id_ed25519, known_hosts: {lab}/known_hosts,
           host_key_policy: strict, ssh_config: null}}
hosts:
  - {{name: wrongport, address: 127.0.0.1, port: {wrong}}}
  - {{name: nokey, address: 127.0.0.1, port: {port}, key_file: {tmp_path}/missing}}
  - {{name: nobody, address: 127.0.0.1, port: {port}, user: nobody}}
  - {{name: unknown, address: 127.0.0.1, port: {port}, known_hosts: {tmp_path}/empty}}
  - {{name: changed, address: 127.0.0.1, port: {port}, known_hosts: {tmp_path}/changed}}
""")
    run = run_cli(tmp_path, "status", "--json", "--hosts", str(tmp_path / "fleet.yaml"))
    assert run.code == 1, run.stdout + run.stderr
    errors = {row["host"]: row["error"] for row in json.loads(run.stdout)["hosts"]}
    expected = {
        "wrongport": f"unreachable: connection refused on 127.0.0.1:{wrong} (fix: check that "
                     "sshd runs there",
        "nokey": f"key file unreadable: {tmp_path}/missing (not found) (fix: ",
        "nobody": f"authentication refused for nobody@127.0.0.1:{port}: offered keys: "
                  f"{lab}/keys/id_ed25519 (SHA256:",
        "unknown": f"host key unknown for 127.0.0.1:{port} (ssh-",
        "changed": f"host key CHANGED for 127.0.0.1:{port}: expected SHA256:",
    }
    for host, words in expected.items():
        assert errors[host].startswith(words), errors[host]
        assert not [x for x in LIBRARY_TEXT if x in errors[host]], errors[host]
    assert f"`ssh-keyscan -p {port} 127.0.0.1 >> {tmp_path}/empty`" in errors["unknown"]
    assert f"`ssh-keygen -R '[127.0.0.1]:{port}' -f {tmp_path}/changed`" in errors["changed"]
