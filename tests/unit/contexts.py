"""Real, small objects for the unit tests that need a step context: a Host, and the lab
playbook rendered for it (the settings a step reads), instead of None or a namespace."""

from __future__ import annotations

import atexit
import shlex
import tempfile
import threading
from collections.abc import Callable, Mapping, Sequence
from functools import cache
from pathlib import Path
from typing import Any

from rollout.config.inventory import Host
from rollout.config.playbook import LAB_PLAYBOOK, Playbook, parse_set_options
from rollout.host.layout import Layout
from rollout.jsontypes import JSON
from rollout.steps.base import HostContext
from rollout.steps.decision import Release
from rollout.steps.kinds import load_playbook
from rollout.transport.agent import HostAgent, agent_command
from rollout.transport.base import RunResult, Transport
from rollout.transport.local import LocalTransport


def small_host(name: str = "h1", address: str = "127.0.0.1", port: int = 22,
               **host_vars: Any) -> Host:
    return Host(name, address, port, "root", None, Path("/k"), "strict", 10, (), host_vars)


@cache
def lab_playbook() -> Playbook:
    """The lab playbook, without params (there are none on a unit test's host)."""
    return load_playbook(LAB_PLAYBOOK, overrides=parse_set_options(("params_files=[]",
                                                                    "pce_bytes=0")))


@cache
def settings_for(host: Host) -> Playbook:
    return lab_playbook().for_host(host)


def host_context(host: Host | None = None, transport: Transport | None = None,
                 layout: Layout | None = None,
                 emit: Callable[..., object] | None = None,
                 release: Release | None = None) -> HostContext:
    """A step context on a real (small) host with the lab playbook's settings; a local
    transport and the default layout unless given."""
    host = host or small_host()
    return HostContext(host, transport or LocalTransport(host.name), layout or Layout(),
                       settings_for(host), release, emit=emit)


_agent_lock = threading.Lock()


@cache
def _local_agent() -> HostAgent:
    """One host agent (host/scripts/agent.py) on this machine for the whole test process,
    started as an SSH host's is (python3 -c BOOTSTRAP), ended when the process ends."""
    with _agent_lock:
        command, stdin = agent_command()
        cache = tempfile.mkdtemp(prefix="rollout-agent-cache-")  # not the user's ~/.cache
        command = f"XDG_CACHE_HOME={shlex.quote(cache)} {command}"
        agent = HostAgent.start("local", LocalTransport().open_stream(command, stdin))
        assert agent is not None, "the local host agent did not start"
        atexit.register(agent.close)
        return agent


class AgentTransport(LocalTransport):
    """A local host whose host scripts and host-module calls run in a warm host agent, as
    an SSH host's do (a forked child each; the script compiled once), instead of a bash and
    a python3 started for each action (about 50 ms of CPU each). For the tests about what
    the scripts decide; shell commands still run as LocalTransport runs them, and the
    tests of the agent and of a script started on its own keep their own processes."""

    def run_script(self, source: str, args: Sequence[str], timeout: float | None = None,
                   before: str = "") -> RunResult:
        return _local_agent().script(source, args, timeout, before)

    def call(self, source: str, call: str, kwargs: Mapping[str, JSON],
             timeout: float | None = None) -> RunResult:
        return _local_agent().call(source, call, kwargs, timeout)
