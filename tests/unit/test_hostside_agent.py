"""The host agent, both halves: agent.py run here as a host runs it (python3 -c BOOTSTRAP),
spoken to by the controller's HostAgent over the process's pipes."""

from __future__ import annotations

import contextlib
import hashlib
import os
import select
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from rollout.errors import TransportError
from rollout.host.scripts import script_text
from rollout.transport.agent import BOOTSTRAP, HostAgent, agent_command
from rollout.transport.base import Stream


class PipeStream(Stream):
    """A Stream over a local child's stdin and stdout, as ChannelStream is over SSH."""

    def __init__(self, p: subprocess.Popen[bytes]) -> None:
        self.p = p
        self._buf = b""

    def readline(self, timeout: float) -> str:
        assert self.p.stdout is not None
        end = time.monotonic() + timeout
        while b"\n" not in self._buf:
            left = end - time.monotonic()
            if left <= 0 or not select.select([self.p.stdout], [], [], left)[0]:
                return ""
            chunk = os.read(self.p.stdout.fileno(), 65536)
            if not chunk:
                return ""
            self._buf += chunk
        line, _, self._buf = self._buf.partition(b"\n")
        return line.decode()

    def write(self, text: str) -> bool:
        assert self.p.stdin is not None
        try:
            self.p.stdin.write(text.encode())
            self.p.stdin.flush()
            return True
        except OSError:
            return False

    @property
    def ended(self) -> bool:
        return self.p.poll() is not None

    def close(self) -> None:
        assert self.p.stdin is not None
        with contextlib.suppress(OSError):
            self.p.stdin.close()
        self.p.wait(timeout=30)


@pytest.fixture
def agent() -> Iterator[HostAgent]:
    command, stdin = agent_command()
    assert BOOTSTRAP in command
    p = subprocess.Popen([sys.executable, "-c", BOOTSTRAP], stdin=subprocess.PIPE,
                         stdout=subprocess.PIPE)
    assert p.stdin is not None
    p.stdin.write(stdin)
    p.stdin.flush()
    started = HostAgent.start("here", PipeStream(p))
    assert started is not None
    yield started
    started.close()
    assert p.returncode == 0  # stdin closed: the agent ends


def test_shell_command_with_stdin_and_exit_status(agent: HostAgent) -> None:
    r = agent.shell("cat; echo err >&2; exit 3", 30, "fed through stdin\n")
    assert (r.exit_code, r.stdout, r.stderr) == (3, "fed through stdin\n", "err\n")
    assert agent.shell("true", None, None).exit_code == 0


def test_a_value_in_a_request_is_data(agent: HostAgent, tmp_path: Path) -> None:
    hostile = f"$(touch {tmp_path}/pwned); `touch {tmp_path}/pwned2`"
    r = agent.script("import sys, json; print(json.dumps(sys.argv))", [hostile], 30)
    assert r.exit_code == 0 and hostile in r.stdout
    assert list(tmp_path.iterdir()) == []


def test_script_runs_as_python3_dash(agent: HostAgent) -> None:
    source = ("import sys\nprint(__name__, sys.argv, repr(sys.stdin.read()))\n"
              "sys.exit(int(sys.argv[1]))\n")
    r = agent.script(source, ["7", "two words"], 30)
    assert r.exit_code == 7
    assert r.stdout == "__main__ ['-', '7', 'two words'] ''\n"
    assert agent.script("raise ValueError('boom')", [], 30).exit_code == 1
    assert "ValueError: boom" in agent.script("raise ValueError('boom')", [], 30).stderr
    assert agent.script("import sys; sys.exit('said why')", [], 30).stderr == "said why\n"


def test_each_script_runs_in_a_fresh_child(agent: HostAgent) -> None:
    source = "import os\nx = globals().get('x', 0) + 1\nprint(x, os.getpid())\n"
    first, second = (agent.script(source, [], 30).stdout.split() for _ in range(2))
    assert first[0] == second[0] == "1" and first[1] != second[1]


def test_source_is_sent_once_per_agent(agent: HostAgent) -> None:
    source = "print('hello')"
    assert agent.script(source, [], 30).stdout == "hello\n"
    assert agent._known  # the agent compiled it: the next call sends the sha alone
    assert agent.script(source, [], 30).stdout == "hello\n"
    agent._known.clear()
    agent._known.add(hashlib.sha256(b"print('new')").hexdigest())
    assert agent.script("print('new')", [], 30).stdout == "new\n"  # unknown there: resent


def test_before_runs_first_and_gates_the_script(agent: HostAgent, tmp_path: Path) -> None:
    mark = tmp_path / "mark"
    r = agent.script(f"print(open({str(mark)!r}).read())", [], 30, before=f"echo hi > {mark}")
    assert r.exit_code == 0 and r.stdout == "hi\n\n"
    r = agent.script("print('never')", [], 30, before="echo no >&2; exit 4")
    assert (r.exit_code, r.stdout, r.stderr) == (4, "", "no\n")


def test_timeout_kills_the_command_and_its_children(agent: HostAgent, tmp_path: Path) -> None:
    pidfile = tmp_path / "child.pid"
    r = agent.shell(f"sleep 300 & echo $! > {pidfile}; wait", 0.5, None)
    assert r.exit_code == 124 and "(timed out)" in r.stderr
    pid = int(pidfile.read_text())
    assert _gone(pid), f"child {pid} of a timed-out command still runs"
    r = agent.script("import time; time.sleep(300)", [], 0.5)
    assert r.exit_code == 124 and "(timed out)" in r.stderr
    assert agent.shell("echo alive", 30, None).stdout == "alive\n"  # the agent goes on


def _gone(pid: int) -> bool:
    for _ in range(100):
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            return True
        if state == "Z":
            return True
        time.sleep(0.05)
    return False


def test_host_scripts_run_through_the_agent(agent: HostAgent) -> None:
    r = agent.script(script_text("lock"), ["--help"], 30)
    assert r.exit_code == 0 and "usage" in r.stdout


def test_agent_gone_is_a_transport_error(agent: HostAgent) -> None:
    stream = agent.stream
    assert isinstance(stream, PipeStream)
    stream.p.kill()
    stream.p.wait()
    with pytest.raises(TransportError, match="connection lost"):
        agent.shell("true", 5, None)
    stream.p.returncode = 0  # the fixture's check: this one was killed on purpose


def test_no_agent_when_the_host_cannot_start_one() -> None:
    p = subprocess.Popen(["sh", "-c", "echo 'python3: not found' >&2; exit 127"],
                         stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert HostAgent.start("here", PipeStream(p)) is None


def test_after_its_first_answer_the_agent_has_the_modules_calls_import_loaded(
    agent: HostAgent
) -> None:
    """The lock's take (the first request) forks without them; every later call forks with
    http.client and the rest already imported (20 ms of a host's CPU per call otherwise)."""
    from rollout.host.scripts.agent import WARM

    source = f"import sys\nprint(sorted(m for m in {list(WARM)!r} if m in sys.modules))\n"
    agent.script(source, [], 30)  # whatever the fixture's agent answered before, a second
    loaded = agent.script(source, [], 30).stdout
    assert loaded.strip() == repr(sorted(WARM))
