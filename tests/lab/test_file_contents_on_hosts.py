"""File contents reach a host over the SSH channel's stdin, never in a command line that
`ps` on the host shows to every local user; what may hold secrets is written 0600."""

from __future__ import annotations

import base64
import hashlib
from collections.abc import Sequence
from pathlib import Path

import pytest

from rollout.config.inventory import Host, load_inventory
from rollout.config.playbook import LAB_PLAYBOOK
from rollout.config.steps import StepSpec
from rollout.engine.hostplan import decide_and_apply
from rollout.host.layout import Layout
from rollout.steps.base import HostContext
from rollout.steps.kinds import load_playbook
from rollout.transport.base import RunResult, Stream, script_command
from rollout.transport.ssh import SshTransport

from .conftest import LabFleet
from .rollout_helpers import reset_host, sh

pytestmark = pytest.mark.lab
HOST = "lab-1"
MARK = "tok-3c1d0e5f-not-for-ps"
CONFIG = StepSpec(name="config", kind="config")  # type: ignore[arg-type]


def host_context(fleet: LabFleet) -> HostContext:
    host = load_inventory(fleet.fleet_path).get(HOST)
    knobs = {"pool_mib": 32, "load_secs": 0.3, "drain_mib_per_sec": 256, "token": MARK}
    settings = load_playbook(LAB_PLAYBOOK, overrides={"lab_knobs": knobs}).for_host(host)
    return HostContext(host, SshTransport(host), Layout(settings.release.root), settings)


class RecordingTransport(SshTransport):
    """The real SSH transport, recording every command line it has a host run: what `ps`
    shows there (sshd and the host agent both run it as `sh -c COMMAND`)."""

    def __init__(self, host: Host) -> None:
        super().__init__(host)
        self.command_lines: list[str] = []

    def run(self, command: str, timeout: float | None = None,
            stdin: str | None = None) -> RunResult:  # fmt: skip
        self.command_lines.append(command)
        return super().run(command, timeout=timeout, stdin=stdin)

    def run_script(self, source: str, args: Sequence[str], timeout: float | None = None,
                   before: str = "") -> RunResult:  # fmt: skip
        self.command_lines.append(script_command(args, before))
        return super().run_script(source, args, timeout=timeout, before=before)

    def open_stream(self, command: str, stdin: bytes) -> Stream | None:
        self.command_lines.append(command)
        return super().open_stream(command, stdin)


def test_the_config_travels_over_stdin_not_in_the_command_line(lab_fleet: LabFleet) -> None:
    """The config holds MARK (a lab knob): it reaches the file on the host, and no command
    line the host ran carries it, as is or base64'd. (A FIFO planted at the writer's
    temporary, as this test once did, is now refused: no write follows a non-file.)"""
    reset_host(HOST)
    ctx = host_context(lab_fleet)
    recorder = RecordingTransport(ctx.host)
    ctx = HostContext(ctx.host, recorder, ctx.layout, ctx.settings)
    try:
        result = decide_and_apply(ctx, CONFIG)
        text = sh(HOST, "cat /data/zk/cuzk.toml")
    finally:
        ctx.transport.close()
        reset_host(HOST)
    assert MARK in text
    assert result.status.value == "changed"
    seen = "\n".join(recorder.command_lines)
    assert any("agent.py" in line for line in recorder.command_lines), seen  # the writer:
    # ops.write_file in the host's agent, its text in the call's kwargs over the channel
    assert MARK not in seen
    assert base64.b64encode(text.encode()).decode()[:48] not in seen


def test_large_stdin_goes_over_the_channel(lab_fleet: LabFleet) -> None:
    ctx = host_context(lab_fleet)
    data = (MARK + "\n") * 40_000  # about 1 MiB: far more than a command line may hold
    try:
        result = ctx.sh("sha256sum", stdin=data).check()
    finally:
        ctx.transport.close()
    assert result.stdout.split()[0] == hashlib.sha256(data.encode()).hexdigest()


def test_the_config_and_its_kept_copy_are_private(lab_fleet: LabFleet, tmp_path: Path) -> None:
    reset_host(HOST)
    sh(HOST, "mkdir -p /data/zk /data/releases/r0 && ln -s releases/r0 /data/current && "
             "echo 'old = 1' > /data/zk/cuzk.toml && chmod 644 /data/zk/cuzk.toml")
    ctx = host_context(lab_fleet)
    try:
        assert decide_and_apply(ctx, CONFIG).status.value == "changed"
    finally:
        ctx.transport.close()
    modes = sh(HOST, "stat -c '%a %n' /data/zk/cuzk.toml /data/zk/cuzk.toml.for-r0")
    reset_host(HOST)
    assert modes.split() == ["600", "/data/zk/cuzk.toml", "600", "/data/zk/cuzk.toml.for-r0"]
