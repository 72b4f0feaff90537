"""The host agent, both halves: agent.py run here as a host runs it (python3 -c BOOTSTRAP),
spoken to by the controller's HostAgent over the process's pipes."""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import select
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from rollout.errors import TransportError
from rollout.host.scripts import script_text
from rollout.host.scripts.codecache import prune_cache
from rollout.transport.agent import BOOTSTRAP, HostAgent, agent_command, source_sha256
from rollout.transport.base import RunResult, Stream

OPS = script_text("ops")
OPS_SHA = source_sha256(OPS)


class PipeStream(Stream):
    """A Stream over a local child's stdin and stdout, as ChannelStream is over SSH."""

    def __init__(self, p: subprocess.Popen[bytes]) -> None:
        self.p = p
        self._buf = b""
        self.sent: list[dict[str, object]] = []  # every request written, parsed

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
        self.sent.append(json.loads(text))
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


def start_agent(cache: Path) -> tuple[HostAgent, subprocess.Popen[bytes]]:
    """agent.py as a host starts it, its code cache in `cache` (XDG_CACHE_HOME)."""
    command, stdin = agent_command()
    assert BOOTSTRAP in command
    p = subprocess.Popen([sys.executable, "-c", BOOTSTRAP], stdin=subprocess.PIPE,
                         stdout=subprocess.PIPE, env={**os.environ, "XDG_CACHE_HOME": str(cache)})
    assert p.stdin is not None
    p.stdin.write(stdin)
    p.stdin.flush()
    started = HostAgent.start("here", PipeStream(p))
    assert started is not None
    return started, p


@pytest.fixture
def agent(tmp_path_factory: pytest.TempPathFactory) -> Iterator[HostAgent]:
    started, p = start_agent(tmp_path_factory.mktemp("agent") / "cache")
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


def test_source_is_sent_once_per_script_and_host(tmp_path: Path) -> None:
    """By sha256 alone; the source only when the agent asks for it (neither compiled on
    this connection nor in the host's code cache), so a second connection sends none."""
    source = "print('hello')"
    sha = hashlib.sha256(source.encode()).hexdigest()
    for connection in range(2):
        agent, p = start_agent(tmp_path / "cache")
        assert isinstance(agent.stream, PipeStream)
        sent = agent.stream.sent
        assert agent.script(source, [], 30).stdout == "hello\n"
        assert "bad-call" in agent.call(OPS, "ops.no_such_action", {}, 30).stdout
        assert agent.script(source, [], 30).stdout == "hello\n"
        with_source = [r["sha"] for r in sent if "source" in r]
        assert with_source == ([sha, OPS_SHA] if connection == 0 else []), with_source
        agent.close()
    cached = sorted(f.name.split(".")[0] for f in (tmp_path / "cache/rollout/code").iterdir())
    assert cached == sorted([sha, OPS_SHA, source_sha256(script_text("agent"))])  # its own too


def test_a_cached_code_file_that_is_not_the_agents_own_is_compiled_again(
    tmp_path: Path,
) -> None:
    """A cache file that is a link, or not readable back, is no cache: the agent asks for
    the source and compiles it; a cache folder others may write is not used at all."""
    source = "print('mine')"
    sha = hashlib.sha256(source.encode()).hexdigest()
    agent, p = start_agent(tmp_path / "cache")
    assert agent.script(source, [], 30).stdout == "mine\n"
    agent.close()
    folder = tmp_path / "cache/rollout/code"
    (cached,) = (f for f in folder.iterdir() if f.name.startswith(sha))
    elsewhere = tmp_path / "elsewhere"
    elsewhere.write_bytes(cached.read_bytes())
    for spoilt in ("link", "garbage", "open folder"):
        cached.unlink()
        if spoilt == "link":
            cached.symlink_to(elsewhere)
        elif spoilt == "garbage":
            cached.write_bytes(b"\xe3not marshal")
        else:
            cached.write_bytes(elsewhere.read_bytes())
            folder.chmod(0o777)
        agent, p = start_agent(tmp_path / "cache")
        assert isinstance(agent.stream, PipeStream)
        sent = agent.stream.sent
        assert agent.script(source, [], 30).stdout == "mine\n", spoilt
        assert [r["sha"] for r in sent if "source" in r] == [sha], spoilt
        agent.close()
    folder.chmod(0o700)


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
    r = agent.script(script_text("diagnose"), ["--help"], 30)
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


def test_the_code_cache_keeps_the_newest_files_only(tmp_path: Path) -> None:
    """Past CACHE_KEEP code files the oldest go: a host rolled by many releases of rollout
    keeps a few megabytes, not one set of scripts per release forever."""
    agent, p = start_agent(tmp_path / "cache")
    folder = tmp_path / "cache/rollout/code"
    for i in range(3):
        assert agent.script(f"print({i})", [], 30).stdout == f"{i}\n"
        old = time.time() - 100 + i
        for f in folder.iterdir():
            if f.name.startswith(hashlib.sha256(f"print({i})".encode()).hexdigest()):
                os.utime(f, (old, old))
    (folder / "not-ours").write_text("kept")
    prune_cache(str(folder), keep=3)  # the agent's own code, the newest, and two more
    left = {f.name.split(".")[0] for f in folder.iterdir()}
    assert left == {"not-ours", source_sha256(script_text("agent")),
                    *(hashlib.sha256(f"print({i})".encode()).hexdigest() for i in (1, 2))}
    agent.close()


def test_a_host_module_is_run_once_in_the_agent_and_each_call_forks_with_it(
        agent: HostAgent) -> None:
    """A module's top level runs in the agent, once (not in each call's fork: ~100 actions
    defined again per call cost the host's CPU); a call's changes die with its fork."""
    source = ("import os\nLOADED_IN = os.getpid()\nSEEN = []\n\n"
              "def call(name, kwargs):\n    SEEN.append(1)\n"
              "    return {'loaded_in': LOADED_IN, 'runs_in': os.getpid(), 'seen': len(SEEN)}\n")
    first, second = (json.loads(agent.call(source, "mod.f", {}, 30).stdout) for _ in range(2))
    assert first["loaded_in"] == second["loaded_in"] != first["runs_in"] != second["runs_in"]
    assert first["seen"] == second["seen"] == 1


def test_a_module_that_fails_to_load_says_why_in_its_call(agent: HostAgent) -> None:
    r = agent.call("raise RuntimeError('broken module')\n", "mod.f", {}, 30)
    assert r.exit_code == 1 and "broken module" in r.stderr
    assert agent.call("def call(name, kwargs):\n    return {'ok': 1}\n", "mod.f", {},
                      30).stdout.strip() == '{"ok": 1}'


@contextlib.contextmanager
def agent_busy(agent: HostAgent, folder: Path) -> Iterator[tuple[threading.Thread, Path]]:
    """A command running through the agent until `let-go` exists in `folder` (made on the
    way out): the command's thread, and that file."""
    started, let_go = folder / "started", folder / "let-go"
    wait = f"touch {started}; while [ ! -e {let_go} ]; do sleep 0.05; done"
    busy = threading.Thread(target=agent.shell, args=(wait, 60, None), daemon=True)
    busy.start()
    try:
        deadline = time.monotonic() + 30
        while not started.exists():
            assert time.monotonic() < deadline
            time.sleep(0.02)
        yield busy, let_go
    finally:
        let_go.touch()
        busy.join(30)


def file_present(answer: RunResult | None) -> str:
    assert answer is not None and answer.exit_code == 0
    return str(json.loads(answer.stdout.splitlines()[-1])["outcome"])


def test_call_if_free_answers_none_at_once_while_another_command_runs(
        agent: HostAgent, tmp_path: Path) -> None:
    """A lock's heartbeat never waits behind the host's step: while a command runs through
    the agent, call_if_free answers None (the caller goes on a channel of its own); once the
    agent is free, it is the call's answer."""
    ask = {"path": str(tmp_path / "started")}
    with agent_busy(agent, tmp_path) as (busy, _):
        assert agent.call_if_free(OPS, "ops.file_present", ask, 30) is None
        assert busy.is_alive()
    assert file_present(agent.call_if_free(OPS, "ops.file_present", ask, 30)) == "present"


def test_call_if_free_waits_for_a_command_that_ends_within_its_wait(
        agent: HostAgent, tmp_path: Path) -> None:
    """Most calls end within a refresh's wait: the refresh then goes through the agent, and
    starts no python3 of its own on the host."""
    ask = {"path": str(tmp_path / "started")}
    with agent_busy(agent, tmp_path) as (_, let_go):
        threading.Timer(0.3, let_go.touch).start()  # the command ends while the call waits
        answer = agent.call_if_free(OPS, "ops.file_present", ask, 30, 60)
    assert file_present(answer) == "present"
