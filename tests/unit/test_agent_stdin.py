"""A text the host writes (ops.write_file's `text`) travels as data: through the host's agent,
in the call's kwargs; without an agent, after the module on stdin, never in the command line.
A host script in the agent reads an empty stdin."""

from __future__ import annotations

import json
from pathlib import Path

import test_hostside_agent

from rollout.host.scripts import script_text
from rollout.transport.agent import HostAgent
from rollout.transport.base import RunResult
from rollout.transport.local import LocalTransport

agent = test_hostside_agent.agent  # the fixture: an agent in a local child
WEIRD = "$(touch /tmp/never) `id` ; '\"\n\x00é"


def test_a_script_in_the_agent_reads_an_empty_stdin(agent: HostAgent) -> None:
    source = "import sys\ndata = sys.stdin.buffer.read()\nprint(len(data), repr(data[:12]))\n"
    assert agent.script(source, [], 30).stdout == "0 b''\n"  # /dev/null


def test_write_file_through_the_agent_writes_the_text(agent: HostAgent, tmp_path: Path) -> None:
    path = tmp_path / "cuzk.toml"
    text = "[lab]\nsecret = 'not in any command line'\n" + WEIRD
    kwargs = {"path": str(path), "text": text, "if_changed": True}
    r = agent.call(script_text("ops"), "ops.write_file", kwargs, 30)
    assert json.loads(r.stdout.splitlines()[-1])["outcome"] == "written"
    assert path.read_text() == text and path.stat().st_mode & 0o777 == 0o600  # data, never code
    again = agent.call(script_text("ops"), "ops.write_file", kwargs, 30)
    assert json.loads(again.stdout.splitlines()[-1])["outcome"] == "unchanged"


def test_without_an_agent_the_text_follows_the_module_on_stdin(tmp_path: Path) -> None:
    seen: list[tuple[str, str | None]] = []

    class Recording(LocalTransport):
        def run(self, command: str, timeout: float | None = None,
                stdin: str | None = None) -> RunResult:
            seen.append((command, stdin))
            return super().run(command, timeout, stdin)

    path = tmp_path / "f"
    r = Recording().call(script_text("ops"), "ops.write_file",
                         {"path": str(path), "text": "the text\n"}, 30)
    assert r.exit_code == 0 and path.read_text() == "the text\n"
    command, stdin = seen[0]
    assert "the text" not in command and stdin is not None and "the text" in stdin
