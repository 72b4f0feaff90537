"""Progress on long work (issue 19), on the lab fleet: a host's pull from a throttled server
reports bytes and rate while it runs, and a host that cannot reach the URL is told to be
pushed to before the push begins."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from rollout import lab
from rollout.config.inventory import load_inventory
from rollout.host.layout import Layout
from rollout.lab.web import WebServer, start_web_server, stop_web_server
from rollout.steps.base import HostContext
from rollout.steps.pull import fetch_command
from rollout.steps.transfer import run_watched
from rollout.transport.ssh import SshTransport

from .conftest import LabFleet
from .rollout_helpers import FAST_KNOBS, REPO, CliRun, assert_serving, fresh_fleet, run_cli, sh

pytestmark = pytest.mark.lab
NO_DOCKER = {"DOCKER_HOST": "unix:///nonexistent/docker.sock"}
FAST = ("--set", f"lab_knobs={FAST_KNOBS}")


@pytest.fixture(scope="module")
def fleet(lab_fleet: LabFleet) -> LabFleet:
    return fresh_fleet(lab_fleet)


@pytest.fixture(scope="module")
def web(fleet: LabFleet) -> Iterator[WebServer]:
    server = start_web_server()
    yield server
    stop_web_server(server)


def publish(work: Path, version: str, url: str) -> int:
    """Build the lab's stand-in at `version`, publish it at `url`; its executables' bytes."""
    out = work / f"bundle-{version}"
    built = run_cli(work, "build", "--out", str(out), "--playbook",
                    str(REPO / "playbooks" / "lab.yaml"), "--set", f"version={version}")
    assert built.code == 0, built.stderr[-3000:]
    assert run_cli(work, "publish", str(out), "--to", url).code == 0
    manifest = json.loads((out / "manifest.json").read_text())
    return sum(int(e["size"]) for e in manifest["executables"].values())


def deploy(work: Path, fleet: LabFleet, url: str, host: str) -> CliRun:
    args = ("rollout", "--hosts", str(fleet.fleet_path), "--release", url, "--limit", host,
            *FAST)
    return run_cli(work, *args, env=NO_DOCKER)


def _of(run: CliRun, host: str) -> list[dict[str, Any]]:
    return [e for e in run.events if e.get("host") == host]


def _upload_end(events: list[dict[str, Any]]) -> int:
    return next(i for i, e in enumerate(events)
                if e["kind"] == "step_end" and e["step"] == "upload")


def test_a_slow_pull_reports_bytes_and_rate_while_it_runs(
    fleet: LabFleet, web: WebServer, tmp_path: Path
) -> None:
    size = publish(tmp_path, "g1", f"{web.url}/g1")
    web.throttle(max(1, size // 4))  # about 4 s
    try:
        run = deploy(tmp_path, fleet, f"{web.url}/g1", "lab-1")
    finally:
        web.unthrottle()
    assert run.code == 0, run.stderr[-3000:]
    events = _of(run, "lab-1")
    end = _upload_end(events)
    progress = [e["data"] for e in events[:end] if e["kind"] == "progress"]
    pulls = [p for p in progress if p["what"] == "pull"]  # preflight may stage the input first
    assert pulls and all(p["total"] == size for p in pulls), progress
    during = [p for p in pulls if 0 < p["bytes"] < size and p["rate"]]
    assert during, pulls  # bytes and a rate while the download ran, before the step ended
    assert pulls[-1]["bytes"] == size
    connecting = next(e for e in events if e["kind"] == "connecting")
    assert "connect timeout 10 s" in connecting["reason"]
    # the console has no terminal here: whole progress lines, never a carriage return
    shown = [line for line in run.stderr.splitlines() if " pull " in line and "%)" in line]
    assert shown and "\r" not in run.stderr, run.stderr[-2000:]
    assert assert_serving("lab-1") == "g1"


def test_the_fallback_is_announced_before_the_push_begins(
    fleet: LabFleet, web: WebServer, tmp_path: Path
) -> None:
    size = publish(tmp_path, "g2", f"{web.loopback_url}/g2")  # not reachable from a host
    run = deploy(tmp_path, fleet, f"{web.loopback_url}/g2", "lab-2")
    assert run.code == 0, run.stderr[-3000:]
    events = _of(run, "lab-2")
    kinds = [e["kind"] for e in events]
    fallback = kinds.index("fallback")
    pushes = [i for i, e in enumerate(events)
              if e["kind"] == "progress" and e["data"]["what"] == "push"]
    assert kinds.index("connecting") < fallback < pushes[0] < _upload_end(events), kinds
    assert "could not reach" in events[fallback]["reason"]
    assert events[pushes[-1]]["data"]["bytes"] == size
    assert any(" fallback " in line for line in run.stderr.splitlines()), run.stderr[-2000:]
    assert assert_serving("lab-2") == "g2"


class Recorder:
    def __init__(self) -> None:
        self.data: list[dict[str, Any]] = []

    def __call__(self, kind: str, **fields: Any) -> None:
        self.data.append(fields["data"])


def _context(fleet: LabFleet, name: str, emit: Recorder) -> HostContext:
    host = load_inventory(fleet.fleet_path).get(name)
    return HostContext(host, SshTransport(host), Layout("/data"), None, emit=emit)


def _big_file(web: WebServer, name: str, size: int) -> str:
    """A file of `size` random bytes on the web server; its sha256."""
    web.sh(f"mkdir -p {web.path('big')} && head -c {size} /dev/urandom > {web.path(name)}")
    return web.sh(f"sha256sum {web.path(name)}").split()[0]


def test_a_download_by_curl_on_the_host_is_watched_over_ssh(
    fleet: LabFleet, web: WebServer
) -> None:
    size = 3 << 20
    digest = _big_file(web, "big/params", size)
    emit = Recorder()
    ctx = _context(fleet, "lab-1", emit)
    web.throttle(size // 3)  # about 3 s
    try:
        code, said = run_watched(ctx, f"curl -fsSL -o /tmp/h-params -- {web.url}/big/params",
                                 "/tmp/h-params", size, "params")
    finally:
        web.unthrottle()
        ctx.transport.close()
    assert code == 0, said
    assert sh("lab-1", "sha256sum /tmp/h-params; rm -f /tmp/h-params").split()[0] == digest
    assert [d for d in emit.data if 0 < d["bytes"] < size and d["rate"]], emit.data


def test_the_host_download_stops_when_the_controller_closes_its_channel(
    fleet: LabFleet, web: WebServer
) -> None:
    size = 1 << 20
    digest = _big_file(web, "big/held", size)
    folder = "/tmp/h-prg-held-pull"
    ctx = _context(fleet, "lab-2", Recorder())
    web.hold_after(5000)
    try:
        args = ["--dir", folder, "--file", "held", f"{web.url}/big/held", digest, str(size)]
        stream = ctx.transport.open_stream(*fetch_command(args))
        assert stream is not None
        line = json.loads(stream.readline(60))
        assert line["progress"]["file"] == "held"
        running = lab.exec_on("lab-2", "pgrep -f '[h]-prg-held-pull'")[0]
        assert running == 0  # a process of its own, named by what it fetches
        stream.close()
        deadline = time.monotonic() + 30  # a bound, not the thing tested
        while lab.exec_on("lab-2", "pgrep -f '[h]-prg-held-pull'")[0] == 0:
            assert time.monotonic() < deadline, "the download outlived its channel"
            time.sleep(0.1)
    finally:
        web.release_hold()
        ctx.transport.close()
        sh("lab-2", f"rm -rf {folder}")
