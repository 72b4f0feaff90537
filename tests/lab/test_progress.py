"""Progress on long work (issue 19), on the lab fleet: a host's pull from a throttled server
reports bytes and rate while it runs, and a host that cannot reach the URL is told to be
pushed to before the push begins."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from rollout.lab.web import WebServer, start_web_server, stop_web_server

from .conftest import LabFleet
from .rollout_helpers import FAST_KNOBS, REPO, CliRun, assert_serving, fresh_fleet, run_cli

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
    pulls = [e["data"] for e in events[:end] if e["kind"] == "progress"]
    assert all(p["what"] == "pull" and p["total"] == size for p in pulls), pulls
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
