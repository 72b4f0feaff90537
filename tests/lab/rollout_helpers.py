"""Helpers for rollout tests on the lab: run the CLI, read events, read hosts directly."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rollout import lab
from rollout.config.playbook import LAB_PLAYBOOK

if TYPE_CHECKING:
    from .conftest import LabFleet

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


def _command(tmp: Path, args: tuple[str, ...]) -> tuple[list[str], Path]:
    events_file = tmp / f"events-{len(list(tmp.glob('events-*')))}.jsonl"
    events_file.touch()
    cmd = [sys.executable, "-m", "rollout", *args]
    if args and args[0] == "rollout":
        cmd += ["--json", str(events_file)]
    return cmd, events_file


def _env(tmp: Path, extra: dict[str, str] | None) -> dict[str, str]:
    return {**os.environ, "ROLLOUT_RUNS_DIR": str(tmp / "runs"), **(extra or {})}


def read_events(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def run_cli(tmp: Path, *args: str, env: dict[str, str] | None = None, cwd: Path = REPO) -> CliRun:
    """`rollout ARGS --json FILE` as a user runs it, from the repository root by default."""
    cmd, events_file = _command(tmp, args)
    p = subprocess.run(
        cmd, cwd=cwd, env=_env(tmp, env), capture_output=True, text=True, timeout=600
    )
    return CliRun(p.returncode, p.stdout, p.stderr, read_events(events_file))


@dataclass
class Background:
    process: subprocess.Popen[str]
    events_file: Path

    def events(self) -> list[dict[str, Any]]:
        return read_events(self.events_file)

    def wait_for(self, predicate: Any, timeout: float = 120) -> dict[str, Any]:
        """The first event matching predicate, once the run has written it."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for event in self.events():
                if predicate(event):
                    return event
            assert self.process.poll() is None, self.process.communicate()
            time.sleep(0.1)
        raise AssertionError("the background rollout never got there")

    def finish(self) -> CliRun:
        out, err = self.process.communicate(timeout=600)
        return CliRun(self.process.returncode, out, err, self.events())


def start_cli(tmp: Path, *args: str, env: dict[str, str] | None = None) -> Background:
    cmd, events_file = _command(tmp, args)
    process = subprocess.Popen(
        cmd, cwd=REPO, env=_env(tmp, env), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    return Background(process, events_file)


def sh(host: str, command: str) -> str:
    code, out = lab.exec_on(host, command)
    assert code == 0, f"{host}: `{command}` exited {code}: {out}"
    return out


def poll(host: str, test: str, tries: int = 600) -> None:
    """Wait (bounded: tries x 0.1 s) until the shell test holds on the host."""
    sh(host, f"for i in $(seq {tries}); do {test} && exit 0; sleep 0.1; done; exit 1")


def reset_host(host: str) -> None:
    """Back to an empty rented host: no supervisor, no daemon, nothing under /data."""
    # [x]yz patterns: pkill -f must not match the shell that runs this very command.
    # Wait until they are gone (a killed supervisor could still write under /data).
    ours = "pgrep -f '[s]upervisor.py|[l]ab-late-reaper'; pgrep -x 'cuzk-daemon|lab-pool-keeper'"
    sh(host, f"{kill_and_wait(ours)} && rm -rf /data/* /dev/shm/lab-*")


def fresh_fleet(
    fleet: LabFleet, hosts: Iterable[str] | None = None, base: Callable[[], CliRun] | None = None
) -> LabFleet:
    """A module's fleet: these hosts (all by default) back to empty rented hosts, then, with
    `base`, a first rollout that must pass."""
    for host in hosts if hosts is not None else [h.name for h in fleet.hosts]:
        reset_host(host)
    if base is not None:
        first = base()
        assert first.code == 0, first.stderr[-3000:]
    return fleet


def kill_and_wait(list_pids: str, tries: int = 600) -> str:
    """Shell: SIGKILL the pids that `list_pids` prints, then wait until none of them is
    alive (a zombie counts as gone: it holds no files nor memory), polling every 50 ms;
    fails after `tries` polls."""
    return (f"pids=$({list_pids}); [ -n \"$pids\" ] && kill -KILL $pids 2>/dev/null; i=0; "
            "while :; do alive=; for p in $pids; do "
            "grep -qs '^[^)]*) [^Z]' /proc/$p/stat && alive=\"$alive $p\"; done; "
            "[ -z \"$alive\" ] && break; i=$((i+1)); "
            f"[ $i -ge {tries} ] && echo still running:$alive && exit 1; sleep 0.05; done")


def host_snapshot(host: str) -> str:
    """Everything a rollout could change on a host; not what the running daemon and its
    supervisor rewrite on their own (logs, the supervisor's heartbeat, which renames a file
    in /data/rollout and so moves that folder's mtime)."""
    return sh(
        host,
        "find /data -not -name '*.log' -not -name supervisor.json -not -path /data/rollout "
        "-printf '%p %s %T@ %l\\n' | sort; cat /data/rollout/daemon.pid "
        "2>/dev/null; ls /data/rollout/hold 2>/dev/null; true",
    )


def host_story(host: str) -> str:
    """What a failed assertion shows besides the run's output: the supervisor's state and
    log, the daemon's log and the host's processes, as they are now."""
    return sh(host, "for f in supervisor.json daemon.pid; do echo \"== $f\"; "
                    "cat /data/rollout/$f; done; echo '== supervisor.log'; "
                    "tail -n 40 /data/rollout/supervisor.log; echo '== daemon.log'; "
                    "tail -n 20 /data/rollout/daemon.log; echo '== ps'; "
                    "ps -eo pid,ppid,stat,etimes,args 2>/dev/null || true")


def status_json(host: str) -> dict[str, Any]:
    return json.loads(sh(host, "curl -fsS http://127.0.0.1:9821/status"))


def jsonl(host: str, path: str) -> list[dict[str, Any]]:
    text = sh(host, f"cat {path} 2>/dev/null; true")
    return [json.loads(line) for line in text.splitlines() if line.strip()]


def daemon_pid(host: str) -> int | None:
    text = sh(host, "cat /data/rollout/daemon.pid 2>/dev/null; true").split()
    return int(text[0]) if text else None


def assert_serving(host: str) -> str:
    """The invariant, read on the host itself: a daemon runs the release current points at,
    answers its status port, passes a proof; no hold, no half-switched or partial state.
    Returns the version it serves."""
    release = sh(host, "readlink /data/current").strip()
    assert release.startswith("releases/"), f"{host}: current -> {release!r}"
    pid_line = sh(host, "cat /data/rollout/daemon.pid").split()
    assert pid_line[2:3] == [f"/data/{release}/cuzk-daemon"], (host, pid_line, release)
    state = sh(host, f"cut -d')' -f2 /proc/{pid_line[0]}/stat").split()[0]
    assert state in "RS", f"{host}: daemon {pid_line[0]} is {state}"
    assert lab.exec_on(host, "test -e /data/rollout/hold")[0] != 0, f"{host}: still on hold"
    assert "partial" not in sh(host, "ls -a /data/releases"), f"{host}: partial upload left"
    assert lab.exec_on(host, "test -e /data/rollout/lock")[0] != 0, f"{host}: lock left"
    assert set(status_json(host)) >= {"uptime_secs", "memory", "counters"}
    version = serving_version(host)
    proof = sh(
        host,
        f"/data/{release}/cuzk-bench -a http://127.0.0.1:9820 single -t porep "
        "--c1 /data/32gbench/c1.json",
    )
    assert "status:    COMPLETED" in proof, f"{host}: {proof}"
    return str(version)


def serving_version(host: str) -> str:
    """The version of the release the running daemon was started from (cuzk's /status names
    none): RELEASE.json beside the executable in the daemon's pidfile."""
    exe = sh(host, "cat /data/rollout/daemon.pid").split()[2]
    meta = json.loads(sh(host, f"cat {exe.rsplit('/', 1)[0]}/RELEASE.json"))
    return str(meta["version"])


def lab_playbook_text() -> str:
    """The lab playbook's text, usable from another folder: its relative paths (the
    dockerfiles, the playbooks' files) made absolute."""
    text = LAB_PLAYBOOK.read_text()
    text = text.replace("../dockerfiles", str(LAB_PLAYBOOK.parent.parent / "dockerfiles"))
    return text.replace(" files/", f" {LAB_PLAYBOOK.parent}/files/")


def rollout_args(fleet_path: Path, version: str) -> tuple[str, ...]:
    """`rollout --hosts FLEET --set version=V`: the start of every test rollout."""
    return ("rollout", "--hosts", str(fleet_path), "--set", f"version={version}")


def inventory_with(work: Path, fleet_path: Path, host: str, extra_vars: str) -> Path:
    """A copy of the lab inventory, usable from another folder, where one host has vars of
    its own (`extra_vars`: YAML flow-mapping entries, e.g. `job: "x"`)."""
    lab_dir = fleet_path.parent
    text = fleet_path.read_text()
    text = text.replace("key_file: keys/", f"key_file: {lab_dir}/keys/")
    text = text.replace("known_hosts: known_hosts", f"known_hosts: {lab_dir}/known_hosts")
    marker = f"  - name: {host}\n"
    head, _, tail = text.partition(marker)
    own = f"vars: {{memory_limit: 512m, {extra_vars}}}"
    tail = tail.replace("vars: {memory_limit: 512m}", own, 1)
    path = work / f"fleet-{host}.yaml"
    path.write_text(head + marker + tail)
    return path


def lab_playbook_with_validate(work: Path, command_lines: str, name: str = "play.yaml",
                               text: str | None = None) -> Path:
    """The lab playbook (usable from `work`; or `text`) with `command_lines` in place of its
    validate command line."""
    lines = (text or lab_playbook_text()).splitlines(keepends=True)
    at = next(i for i, line in enumerate(lines) if line.startswith("  command: "))
    lines[at] = command_lines
    path = work / name
    path.write_text("".join(lines))
    return path


def marks_made(host: str, marks: Iterable[str]) -> list[str]:
    """Which of these files exist, on the controller and on `host` (`host:path`)."""
    found = [m for m in marks if Path(m).exists()]
    listing = sh(host, f"ls -d {' '.join(marks)} 2>/dev/null || true").split()
    return found + [f"{host}:{m}" for m in listing]


def wait_until(predicate: Any, bound: float = 120.0) -> Any:
    """Poll a condition; the bound only ends a wait that would never end."""
    end = time.monotonic() + bound
    while time.monotonic() < end:
        value = predicate()
        if value:
            return value
        time.sleep(0.2)
    raise AssertionError("condition not met within the bound")


def sidecar_ended(host: str) -> dict[str, str]:
    """The proofs the host's curio-like sidecar saw end: job id -> completed, failed or lost."""
    return {e["job_id"]: e["event"] for e in lab.sidecar_events(host)
            if e.get("event") in ("completed", "failed", "lost")}
