"""A respawner is found by what it is, not by timing (issue 17): the facts report each cuzk
daemon's parent chain and every shell loop that starts cuzk; preflight refuses a host where
one would start cuzk again behind the supervisor, adopt or not, naming it and the hand-over
(docs/adopt.md)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from test_hostside_facts import run_facts

from rollout.host.facts import HostFacts
from rollout.host.scripts.actions import facts as facts_rule
from rollout.steps.kinds import preflight
from rollout.steps.preflight_inputs import Look

PYTHON = os.environ.get("ROLLOUT_HOSTSIDE_PYTHON", sys.executable)


def wait_for(what: Any, bound: float = 60.0) -> Any:
    end = time.monotonic() + bound
    while not (found := what()):
        assert time.monotonic() < end, "never came"
        time.sleep(0.05)
    return found


def children(pid: int) -> list[int]:
    text = Path(f"/proc/{pid}/task/{pid}/children").read_text()
    return [int(n) for n in text.split()]


@pytest.fixture
def loop(tmp_path: Path) -> Any:
    """An entrypoint.sh loop that restarts a 'cuzk-daemon' 10 s after it ends."""
    (tmp_path / "cuzk-daemon").symlink_to("/bin/sleep")  # named cuzk-daemon by its argv[0]
    script = tmp_path / "entrypoint.sh"
    script.write_text(f"while true; do\n  {tmp_path}/cuzk-daemon 60\n  sleep 10\ndone\n")
    shell = subprocess.Popen(["sh", str(script)])
    daemon = wait_for(lambda: children(shell.pid))[0]
    yield shell, daemon, script
    shell.kill()
    shell.wait()
    subprocess.run(["kill", str(daemon)], check=False)


def test_facts_report_the_daemons_parent_chain_and_the_loop(
    loop: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    shell, daemon, script = loop
    out = run_facts(tmp_path / "root")
    [found] = [p for p in out["cuzk_processes"] if p["pid"] == daemon]
    parent = found["parents"][0]
    assert parent["pid"] == shell.pid and parent["shell"] is True
    assert parent["starts_cuzk"] is True  # its script names cuzk
    assert parent["cmdline"] == f"sh {script}"
    monkeypatch.setattr(facts_rule, "in_ssh_session", lambda proc, pid: False)
    assert shell.pid in [p["pid"] for p in facts_rule.cuzk_loops("/proc", set())]
    # a shell the trusted supervisor runs (a launcher) is rollout's own: not a loop
    assert shell.pid not in [p["pid"] for p in facts_rule.cuzk_loops("/proc", set(), os.getpid())]


def test_a_loop_between_two_restarts_is_found_by_its_script(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No daemon runs (the loop sleeps before the next start): the shell is still found."""
    script = tmp_path / "entrypoint.sh"
    script.write_text("while true; do\n  sleep 30\n  ./cuzk -c cuzk.toml\ndone\n")
    shell = subprocess.Popen(["sh", str(script)])
    monkeypatch.setattr(facts_rule, "in_ssh_session", lambda proc, pid: False)
    try:
        wait_for(lambda: children(shell.pid))
        loops = facts_rule.cuzk_loops("/proc", set())
        assert [p for p in loops if p["pid"] == shell.pid][0]["starts_cuzk"] is True
    finally:
        shell.kill()
        shell.wait()


def test_a_script_that_is_a_fifo_is_never_read(tmp_path: Path) -> None:
    """A hostile host's script path may be a FIFO: opened without blocking, not read."""
    fifo = tmp_path / "entrypoint.sh"
    os.mkfifo(fifo)
    assert facts_rule.script_of("/proc", os.getpid(), ["sh", str(fifo)]) == ""
    assert facts_rule.script_of("/proc", os.getpid(), ["sh", "-c", "cuzk"]) == ""


def daemon(pid: int, *parents: dict[str, Any], supervised: bool = False) -> dict[str, Any]:
    return {"pid": pid, "cmdline": "cuzk-daemon -c /data/zk/cuzk.toml", "supervised": supervised,
            "starttime": 4242,  # named by its start time: adoptable
            "ancestors": [p["pid"] for p in parents], "parents": list(parents)}


INIT = {"pid": 1, "program": "lab-init", "cmdline": "/usr/bin/python3 /usr/local/bin/lab-init"}
LOOP = {"pid": 300, "program": "dash", "cmdline": "sh /root/entrypoint.sh", "shell": True,
        "starts_cuzk": True}


def ownership(adopt: bool, **facts: Any) -> list[str]:
    ctx = SimpleNamespace(settings=SimpleNamespace(preflight=SimpleNamespace(adopt=adopt)))
    notes: list[str] = []
    return preflight.check_ownership(Look(ctx, HostFacts.parse(facts)), notes)  # type: ignore[arg-type]


def test_an_orphan_under_an_init_that_only_reaps_is_adopted() -> None:
    assert ownership(True, cuzk_processes=[daemon(50, INIT)]) == []


@pytest.mark.parametrize("adopt", [True, False])
def test_a_daemon_started_by_a_loop_is_refused_adopt_or_not(adopt: bool) -> None:
    problems = ownership(adopt, cuzk_processes=[daemon(50, LOOP, INIT)],
                         cuzk_loops=[LOOP])
    assert problems[0].startswith(
        "cuzk daemon pid 50 (cuzk-daemon -c /data/zk/cuzk.toml) is started by pid 300 "
        "(`sh /root/entrypoint.sh`), which is not rollout's supervisor: whatever its restart "
        "delay, it would start cuzk again")
    assert "docs/adopt.md" in problems[0] and "rerun with --adopt" in problems[0]
    assert len(problems) == (1 if adopt else 2)  # the loop once; without adopt, the daemon too


def test_an_entrypoint_that_is_pid_1_and_starts_cuzk_is_a_respawner() -> None:
    entry = {"pid": 1, "program": "bash", "cmdline": "bash /entrypoint.sh", "shell": True,
             "starts_cuzk": True}
    [problem] = ownership(True, cuzk_processes=[daemon(50, entry)])
    assert "is started by pid 1 (`bash /entrypoint.sh`)" in problem


def test_any_other_live_parent_is_one_too() -> None:
    """A parent that is not init may wait for cuzk and start it again: named, not guessed."""
    wrapper = {"pid": 77, "program": "runner.py", "cmdline": "python3 /opt/runner.py"}
    [problem] = ownership(True, cuzk_processes=[daemon(50, wrapper, INIT)])
    assert "is started by pid 77 (`python3 /opt/runner.py`)" in problem


def test_rollouts_own_daemon_is_not_examined() -> None:
    sup = {"pid": 40, "program": "supervisor.py", "cmdline": "python3 /data/rollout/supervisor.py"}
    assert ownership(False, cuzk_processes=[daemon(50, sup, INIT, supervised=True)]) == []
    assert preflight.respawner(HostFacts.parse(
        {"cuzk_processes": [daemon(50, sup)]}).cuzk[0]) is None


def test_a_loop_with_no_daemon_running_is_refused() -> None:
    [problem] = ownership(True, cuzk_loops=[LOOP])
    assert problem.startswith("a shell that starts cuzk runs: pid 300 (`sh /root/entrypoint.sh`)")


def test_a_hostile_parent_chain_is_data() -> None:
    """Garbage parents are skipped; an ESC in a command line is shown as '?'."""
    bad = [7, "x", {"pid": "300"}, {"pid": -1}]
    assert ownership(True, cuzk_processes=[{**daemon(50), "parents": bad}],
                     cuzk_loops="x") == []
    evil = {**LOOP, "cmdline": "sh \x1b[2J/root/e.sh"}
    [problem] = ownership(True, cuzk_loops=[evil])
    assert "`sh ?[2J/root/e.sh`" in problem and "\x1b" not in problem


@pytest.mark.parametrize(("text", "loops"), [
    ("while true; do\n  $(readlink -f /data/current)/cuzk-daemon -c /data/zk/cuzk.toml\n"
     "  sleep 10\ndone\n", True),  # the field's entrypoint.sh
    ("while true; do\n  sleep 30\n  ./cuzk -c cuzk.toml\ndone\n", True),
    ("until false; do nohup cuzk-daemon; done", True),
    # a one-shot command that only names cuzk is no respawner (the lab's own probe of a
    # partial release during a rollout was refused so), nor a loop that only looks for it
    ("exec > /tmp/out 2>&1; stat -c %s /data/releases/.partial-r1-pull/cuzk-daemon", False),
    ("tail -f /data/cuzk-daemon.log", False),
    ("while pgrep -x cuzk-daemon >/dev/null; do sleep 0.1; done", False),
    ("for p in $(pgrep -x cuzk-daemon); do kill -0 $p; done", False),
])
def test_a_loop_is_a_shell_that_runs_cuzk_as_a_command_in_a_loop(text: str, loops: bool) -> None:
    assert facts_rule.runs_cuzk_in_a_loop(text) is loops
