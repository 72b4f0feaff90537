"""A host script that reads its stdin (files.py: the text to write) runs in the host's agent,
fed through a pipe, instead of a python3 of its own; without an agent it runs as before,
the text after the script on stdin, never in the command line."""

from __future__ import annotations

import json
from pathlib import Path

import test_hostside_agent

from rollout.host.scripts import script_text
from rollout.transport.agent import HostAgent
from rollout.transport.base import RunResult
from rollout.transport.local import LocalTransport

agent = test_hostside_agent.agent  # the fixture: an agent in a local child


def test_a_script_reads_the_stdin_it_is_fed_and_only_that(agent: HostAgent) -> None:
    source = "import sys\ndata = sys.stdin.buffer.read()\nprint(len(data), repr(data[:12]))\n"
    big = "x" * (1 << 20) + "end"  # more than a pipe holds: fed while the child reads
    assert agent.script(source, [], 30, stdin=big).stdout == f"{len(big)} b'xxxxxxxxxxxx'\n"
    assert agent.script(source, [], 30).stdout == "0 b''\n"  # none: /dev/null, as before
    weird = "$(touch /tmp/never) `id` ; '\"\n\x00é"
    assert agent.script("import sys; print(repr(sys.stdin.read()))", [], 30,
                        stdin=weird).stdout == repr(weird) + "\n"  # data, never code


def test_a_script_that_reads_nothing_still_ends(agent: HostAgent) -> None:
    r = agent.script("print('done')", [], 30, stdin="y" * (1 << 20))
    assert (r.exit_code, r.stdout) == (0, "done\n")


def test_files_write_through_the_agent_writes_the_text(agent: HostAgent, tmp_path: Path) -> None:
    path = tmp_path / "cuzk.toml"
    text = "[lab]\nsecret = 'not in any command line'\n"
    r = agent.script(script_text("files"), ["write", str(path), "--if-changed"], 30, stdin=text)
    assert json.loads(r.stdout.splitlines()[-1]) == {"ok": True, "changed": True}
    assert path.read_text() == text and path.stat().st_mode & 0o777 == 0o600
    again = agent.script(script_text("files"), ["write", str(path), "--if-changed"], 30,
                         stdin=text)
    assert json.loads(again.stdout.splitlines()[-1])["changed"] is False


def test_without_an_agent_the_text_follows_the_script_on_stdin(tmp_path: Path) -> None:
    seen: list[tuple[str, str | None]] = []

    class Recording(LocalTransport):
        def run(self, command: str, timeout: float | None = None,
                stdin: str | None = None) -> RunResult:
            seen.append((command, stdin))
            return super().run(command, timeout, stdin)

    path = tmp_path / "f"
    r = Recording().run_script_fed(script_text("files"), "files.py",
                                   ["write", str(path)], "the text\n", 30)
    assert r.exit_code == 0 and path.read_text() == "the text\n"
    command, stdin = seen[0]
    assert "the text" not in command and stdin is not None and stdin.endswith("the text\n")
