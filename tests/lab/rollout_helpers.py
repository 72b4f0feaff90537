"""Helpers for rollout tests on the lab: run the CLI, read events, read hosts directly."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rollout import lab

REPO = Path(__file__).resolve().parents[2]
FAST_KNOBS = "{pool_mib: 32, load_secs: 0.3, drain_mib_per_sec: 256, prove_secs: 0.1}"


@dataclass
class CliRun:
    code: int
    stdout: str
    stderr: str
    events: list[dict[str, Any]]

    def steps(self, host: str, kind: str = "step_end") -> dict[str, dict[str, Any]]:
        return {e["step"]: e for e in self.events if e["kind"] == kind and e["host"] == host}

    def host_end(self, host: str) -> dict[str, Any]:
        return next(e for e in self.events if e["kind"] == "host_end" and e["host"] == host)


def run_cli(tmp: Path, *args: str) -> CliRun:
    """`rollout ARGS --json FILE` as a user runs it, from the repository root."""
    events_file = tmp / f"events-{len(list(tmp.glob('events-*')))}.jsonl"
    env = {**os.environ, "ROLLOUT_RUNS_DIR": str(tmp / "runs")}
    cmd = [sys.executable, "-m", "rollout", *args]
    if args and args[0] == "rollout":
        cmd += ["--json", str(events_file)]
    p = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=600)
    events = []
    if events_file.exists():
        events = [json.loads(line) for line in events_file.read_text().splitlines()]
    return CliRun(p.returncode, p.stdout, p.stderr, events)


def sh(host: str, command: str) -> str:
    code, out = lab.exec_on(host, command)
    assert code == 0, f"{host}: `{command}` exited {code}: {out}"
    return out


def reset_host(host: str) -> None:
    """Back to an empty rented host: no supervisor, no daemon, nothing under /data."""
    # [x]yz patterns: pkill -f must not match the shell that runs this very command.
    lab.exec_on(host, "pkill -KILL -f '[s]upervisor.py'; pkill -KILL -f '[l]ab-late-reaper'; "
                      "pkill -KILL -x cuzk-daemon; pkill -KILL -x lab-pool-keeper; sleep 0.3; "
                      "rm -rf /data/* /dev/shm/lab-*")


def host_snapshot(host: str) -> str:
    """Everything a rollout could change on a host; not what the running daemon and its
    supervisor rewrite on their own (logs, the supervisor's heartbeat)."""
    return sh(host, "find /data -not -name '*.log' -not -name supervisor.json "
                    "-printf '%p %s %T@ %l\\n' | sort; cat /data/rollout/daemon.pid "
                    "2>/dev/null; ls /data/rollout/hold 2>/dev/null; true")


def status_json(host: str) -> dict[str, Any]:
    return json.loads(sh(host, "curl -fsS http://127.0.0.1:9821/status"))


def jsonl(host: str, path: str) -> list[dict[str, Any]]:
    text = sh(host, f"cat {path} 2>/dev/null; true")
    return [json.loads(line) for line in text.splitlines() if line.strip()]
