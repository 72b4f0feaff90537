"""A respawner is found by the daemon's program (issue 27): the host's facts read a shell's
command line or script as text, never running it, and a command runs the daemon when the
word in its executable position (after `do`, `;`, a `$(...)`, an assignment, a launcher
such as nohup, or inside sh -c) is cuzk-daemon or cuzk. A loop of cuzk-bench (a client) or
one that reads the daemon's log is no respawner; a loop of the daemon is, spelled however."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from test_respawner import children, wait_for

from rollout.host.scripts.actions import facts as facts_rule
from rollout.host.scripts.common import DAEMON_NAMES

BENCH_LOOP = ("while true; do /data/current/cuzk-bench -a http://127.0.0.1:9820 status; "
              "sleep 5; done")
DAEMON_LOOP = "while :; do /data/current/cuzk-daemon -c /data/zk/cuzk.toml; done"


@pytest.mark.parametrize(("text", "respawns"), [
    (BENCH_LOOP, False),
    (DAEMON_LOOP, True),
    ("tail -f /data/zk/cuzk.log", False),
    ("while true; do tail -f /data/zk/cuzk.log; sleep 1; done", False),
    ("while true; do grep -c cuzk /var/log/x; cat /data/cuzk; sleep 9; done", False),
    ("while true; do cuzk-bench -a http://h:9820 single -t porep --c1 c1.json; done", False),
    ("while true; do echo 'cuzk-daemon -c x' >> /tmp/log; sleep 1; done", False),  # an arg
    ("# while true; do cuzk-daemon; done\nwhile true; do sleep 1; done", False),  # a comment
    ("exec >/tmp/cuzk 2>&1\nwhile true; do sleep 60; done", False),  # a redirection target
    ("while true; do\n  ./cuzk -c cuzk.toml >>/tmp/cuzk-daemon.log 2>&1 &\n  sleep 5\ndone",
     True),  # the field's entrypoint: `make cuzk`'s name
    ("D=/data/current/cuzk-daemon\nwhile true; do \"$D\" -c x; sleep 3; done", True),
    ("while true; do ${BIN:-/data/current/cuzk-daemon} -c x; done", True),
    ("while true; do timeout 3600 /data/current/cuzk-daemon; sleep 1; done", True),
    ("while true; do nohup setsid env A=1 cuzk-daemon -c x; done", True),
    ("while true; do sh -c '/data/current/cuzk-daemon -c x'; sleep 2; done", True),
    ("start() { /data/current/cuzk-daemon -c x; }\nwhile true; do start; sleep 1; done", True),
    ("until false; do if true; then cuzk-daemon; fi; done", True),
    ("while true; do\\\n  cuzk-daemon -c x; done", True),  # a continued line
])
def test_a_loop_respawns_when_a_command_runs_the_daemons_program(text: str,
                                                                 respawns: bool) -> None:
    assert facts_rule.runs_cuzk_in_a_loop(text) is respawns
    assert set(DAEMON_NAMES) == {"cuzk-daemon", "cuzk"}  # the one list of its names


@pytest.mark.parametrize("text", [
    "'" * 70000, "$(" * 20000, "a=" * 30000, "\\" * 50001, "while " * 10000,
    "".join(f"X{i}=$X{i + 1}\n" for i in range(3000)) + "while :; do $X0; done",
    "while true; do " + "sh -c '" * 200 + "cuzk-daemon",
])
def test_hostile_text_is_read_in_bounds(text: str) -> None:
    """Unbalanced quotes, deep nesting, long variable chains: an answer, never an error."""
    assert facts_rule.runs_cuzk_in_a_loop(text) in (True, False)


@pytest.fixture
def shells(monkeypatch: pytest.MonkeyPatch) -> Iterator[dict[str, subprocess.Popen[bytes]]]:
    """Three live shells outside any SSH session: a bench poll, a daemon loop (sleeping
    before its next start) and a log tail; plus a Python wrapper that names cuzk."""
    monkeypatch.setattr(facts_rule, "in_ssh_session", lambda proc, pid: False)
    texts = {"bench": f"sleep 60; {BENCH_LOOP}",
             "daemon": "while :; do sleep 60; /data/current/cuzk-daemon -c x; done",
             "tail": "sleep 60; tail -f /data/zk/cuzk.log"}
    running = {name: subprocess.Popen(["sh", "-c", text]) for name, text in texts.items()}
    running["wrapper"] = subprocess.Popen(
        [sys.executable, "-c", "import time; time.sleep(60)", "run-cuzk"])
    for name in texts:
        wait_for(lambda name=name: children(running[name].pid))
    cmdline = Path(f"/proc/{running['wrapper'].pid}/cmdline")
    wait_for(lambda: b"run-cuzk" in cmdline.read_bytes())  # exec'd
    yield running
    for proc in running.values():
        proc.kill()
        proc.wait()


def test_the_facts_list_the_daemons_loop_and_not_the_benchs_nor_the_tail(
    shells: dict[str, subprocess.Popen[bytes]]
) -> None:
    loops = {p["pid"] for p in facts_rule.cuzk_loops("/proc", set())}
    assert shells["daemon"].pid in loops
    assert shells["bench"].pid not in loops and shells["tail"].pid not in loops
    seen = {name: facts_rule.what_it_is("/proc", proc.pid) for name, proc in shells.items()}
    assert seen["daemon"]["starts_cuzk"] and seen["daemon"]["loops_cuzk"]
    assert not seen["bench"]["starts_cuzk"] and not seen["bench"]["loops_cuzk"]
    assert not seen["tail"]["starts_cuzk"]  # an init that tails the log only reaps
    # a program rollout cannot read (a Python wrapper): its command line naming cuzk counts
    assert seen["wrapper"]["starts_cuzk"] and not seen["wrapper"]["shell"]


def test_a_script_file_is_read_too(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(facts_rule, "in_ssh_session", lambda proc, pid: False)
    for name, text, listed in (("poll.sh", f"sleep 60\n{BENCH_LOOP}\n", False),
                               ("entry.sh", f"sleep 60\n{DAEMON_LOOP}\n", True)):
        script = tmp_path / name
        script.write_text(text)
        shell = subprocess.Popen(["sh", str(script)])
        try:
            wait_for(lambda shell=shell: children(shell.pid))
            loops = {p["pid"] for p in facts_rule.cuzk_loops("/proc", set())}
            assert (shell.pid in loops) is listed, name
        finally:
            shell.kill()
            shell.wait()
