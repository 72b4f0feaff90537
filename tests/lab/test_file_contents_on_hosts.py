"""File contents reach a host over the SSH channel's stdin, never in a command line that
`ps` on the host shows to every local user; what may hold secrets is written 0600."""

from __future__ import annotations

import base64
import hashlib
import threading
import time
from pathlib import Path

import pytest

from rollout.config.inventory import load_inventory
from rollout.config.playbook import LAB_PLAYBOOK, load_playbook
from rollout.config.steps import StepSpec
from rollout.engine.hostplan import decide_and_apply
from rollout.host.layout import Layout
from rollout.output.events import StepResult
from rollout.steps.base import HostContext
from rollout.transport.ssh import SshTransport

from .conftest import LabFleet
from .rollout_helpers import reset_host, sh

pytestmark = pytest.mark.lab
HOST = "lab-1"
MARK = "tok-3c1d0e5f-not-for-ps"
WRITER = "cuzk.toml.new"
CONFIG = StepSpec(name="config", kind="config")  # type: ignore[arg-type]


def host_context(fleet: LabFleet) -> HostContext:
    host = load_inventory(fleet.fleet_path).get(HOST)
    knobs = {"pool_mib": 32, "load_secs": 0.3, "drain_mib_per_sec": 256, "token": MARK}
    settings = load_playbook(LAB_PLAYBOOK, overrides={"lab_knobs": knobs}).for_host(host)
    return HostContext(host, SshTransport(host), Layout(settings.release.root), settings)


def command_lines_once_writing(host: str, timeout: float = 60) -> str:
    """Every process's command line on the host, read once the config's writer is blocked
    on its FIFO (a state, polled until it holds)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        lines = sh(host, "for f in /proc/[0-9]*/cmdline; do tr '\\0' ' ' < $f; echo; done; true")
        if any(WRITER in line for line in lines.splitlines()):
            return lines
        time.sleep(0.1)
    raise AssertionError(f"no process on {host} ever wrote {WRITER}")


def test_the_config_travels_over_stdin_not_in_the_command_line(lab_fleet: LabFleet) -> None:
    reset_host(HOST)
    sh(HOST, f"mkdir -p /data/zk && mkfifo /data/zk/{WRITER}")
    ctx = host_context(lab_fleet)
    results: list[StepResult] = []
    worker = threading.Thread(target=lambda: results.append(decide_and_apply(ctx, CONFIG)))
    worker.start()
    try:
        seen = command_lines_once_writing(HOST)
        text = sh(HOST, f"timeout 60 cat /data/zk/{WRITER}")  # lets the writer finish
    finally:
        worker.join(timeout=120)
        ctx.transport.close()
        reset_host(HOST)
    assert MARK in text
    assert results and results[0].status.value == "changed"
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
