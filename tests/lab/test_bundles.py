"""Build once, deploy the same bytes (issue 11): bundles deployed without Docker, published
to the lab's own web server and pulled by the hosts themselves."""

from __future__ import annotations

import json
import shutil
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from rollout import lab
from rollout.commands import app
from rollout.lab.web import WebServer, start_web_server, stop_web_server
from rollout.transport.counting import CountingTransport, SentBytes

from .conftest import LabFleet
from .rollout_helpers import (
    FAST_KNOBS,
    REPO,
    CliRun,
    assert_serving,
    fresh_fleet,
    host_snapshot,
    run_cli,
    sh,
    start_cli,
)

pytestmark = pytest.mark.lab
NO_DOCKER = {"DOCKER_HOST": "unix:///nonexistent/docker.sock"}
FAST = ("--set", f"lab_knobs={FAST_KNOBS}")


@pytest.fixture(scope="module")
def fleet(lab_fleet: LabFleet) -> LabFleet:
    return fresh_fleet(lab_fleet)


@pytest.fixture(scope="module")
def work(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("bundles")


@pytest.fixture(scope="module")
def web(fleet: LabFleet) -> Iterator[WebServer]:
    server = start_web_server()
    yield server
    stop_web_server(server)


def build(work: Path, version: str) -> Path:
    out = work / f"bundle-{version}"
    lab_playbook = str(REPO / "playbooks" / "lab.yaml")  # no --hosts: name the stand-in's
    run = run_cli(work, "build", "--out", str(out), "--playbook", lab_playbook,
                  "--set", f"version={version}")
    assert run.code == 0, run.stderr[-3000:]
    return out


def manifest(bundle: Path) -> dict:  # type: ignore[type-arg]
    return json.loads((bundle / "manifest.json").read_text())  # type: ignore[no-any-return]


def deploy(work: Path, fleet: LabFleet, release: str, *extra: str) -> CliRun:
    args = ("rollout", "--hosts", str(fleet.fleet_path), "--release", release, *FAST, *extra)
    return run_cli(work, *args, env=NO_DOCKER)


def test_build_once_deploy_without_docker_promote_to_the_next_fleet(
    fleet: LabFleet, work: Path
) -> None:
    bundle = build(work, "b1")
    meta = manifest(bundle)
    assert meta["version"] == "b1" and meta["build_args"]["VERSION"] == "b1"
    assert meta["image_digest"].startswith("sha256:") and set(meta["executables"]) == {
        "cuzk-daemon", "cuzk-bench"}  # fmt: skip

    tampered = work / "tampered"
    shutil.copytree(bundle, tampered)
    data = bytearray((tampered / "cuzk-daemon").read_bytes())
    data[-2] ^= 1
    (tampered / "cuzk-daemon").write_bytes(bytes(data))
    before = {h.name: host_snapshot(h.name) for h in fleet.hosts}
    refused = deploy(work, fleet, str(tampered))
    assert refused.code == 2, refused.stderr[-2000:]
    assert "refused: cuzk-daemon sha256 differs" in refused.stderr
    assert not refused.events  # not one host was touched, not even locked
    assert before == {h.name: host_snapshot(h.name) for h in fleet.hosts}

    staging = deploy(work, fleet, str(bundle), "--limit", "lab-1")
    assert staging.code == 0, staging.stderr[-3000:]
    build_step = staging.steps(None)["build"]  # type: ignore[arg-type]
    assert build_step["status"] == "skipped" and "bundle built elsewhere" in build_step["reason"]
    production = deploy(work, fleet, str(bundle), "--limit", "lab-2,lab-3")
    assert production.code == 0, production.stderr[-3000:]
    for host in fleet.hosts:
        assert sh(host.name, "readlink /data/current").strip() == f"releases/{meta['release']}"
        assert assert_serving(host.name) == "b1"


def _partial_size(host: str, path: str) -> int:
    code, out = lab.exec_on(host, f"stat -c %s {path}")
    return int(out) if code == 0 else -1


def _wait_for_size(host: str, path: str, size: int, run: object) -> None:
    deadline = time.monotonic() + 120
    while _partial_size(host, path) != size:
        assert time.monotonic() < deadline, f"{path} on {host} never reached {size} bytes"
        assert run.process.poll() is None, run.process.communicate()  # type: ignore[attr-defined]
        time.sleep(0.1)


def _one_attempt_playbook(work: Path) -> Path:
    text = (REPO / "playbooks" / "lab.yaml").read_text()
    text = text.replace("../dockerfiles", str(REPO / "dockerfiles"))
    text = text.replace(" files/", f" {REPO}/playbooks/files/")
    text = text.replace("kind: upload, retry: {attempts: 3, on: [transport, step_failed]}",
                        "kind: upload, retry: {attempts: 1}")
    path = work / "one-attempt.yaml"
    path.write_text(text)
    return path


def test_host_pull_resumes_after_a_cut_and_refuses_a_corrupted_file(
    fleet: LabFleet, work: Path, web: WebServer
) -> None:
    bundle = build(work, "p1")
    release = manifest(bundle)["release"]
    url = f"{web.url}/p1"
    published = run_cli(work, "publish", str(bundle), "--to", url)
    assert published.code == 0, published.stderr[-2000:]

    web.hold_after(4096)  # every download stops after 4 KiB until the hold is lifted
    partial = f"/data/releases/.partial-{release}-pull/cuzk-daemon"
    args = ("rollout", "--hosts", str(fleet.fleet_path), "--playbook",
            str(_one_attempt_playbook(work)), "--release", url, "--limit", "lab-1", *FAST)
    cut = start_cli(work, *args, env=NO_DOCKER)
    _wait_for_size("lab-1", partial, 4096, cut)
    sh("lab-1", f"pkill -KILL -f '[.]partial-{release}-pull'")  # the download, midway
    first = cut.finish()
    assert first.code == 1
    assert first.steps("lab-1")["upload"]["status"] == "failed"
    assert _partial_size("lab-1", partial) == 4096  # kept for the next run

    web.release_hold()
    rerun = run_cli(work, *args, env=NO_DOCKER)
    assert rerun.code == 0, rerun.stderr[-3000:]
    assert "resumed cuzk-daemon from byte 4096" in rerun.steps("lab-1")["upload"]["reason"]
    gets = [r for r in web.requests() if r["path"] == "/p1/cuzk-daemon" and r["method"] == "GET"]
    # the server logs a GET when it ends: the cut one may end (its hold released) after the rerun
    gets.sort(key=lambda r: r["range"] or "")
    assert [r["range"] for r in gets] == [None, "bytes=4096-"], gets
    size = manifest(bundle)["executables"]["cuzk-daemon"]["size"]
    assert gets[1]["status"] == 206 and gets[1]["bytes"] == size - 4096  # only the rest
    assert assert_serving("lab-1") == "p1"

    corrupt = f"{web.url}/corrupt"
    assert run_cli(work, "publish", str(bundle), "--to", corrupt).code == 0
    web.sh(f"printf X | dd of={web.path('corrupt/cuzk-bench')} bs=1 seek=100 conv=notrunc")
    before = sh("lab-2", "readlink /data/current; true")
    refused = deploy(work, fleet, corrupt, "--limit", "lab-2")
    assert refused.code == 1
    upload = refused.steps("lab-2")["upload"]
    assert upload["status"] == "failed" and "(sha256)" in upload["reason"], upload
    assert not [e for e in refused.events if e["kind"] == "retry"]  # refused, not retried
    assert sh("lab-2", "readlink /data/current; true") == before
    assert lab.exec_on("lab-2", f"ls /data/releases/.partial-{release}-pull/cuzk-bench")[0] != 0


def test_a_host_that_cannot_reach_the_url_gets_the_release_pushed(
    fleet: LabFleet, work: Path, web: WebServer
) -> None:
    bundle = build(work, "f1")
    # This machine reaches the server on its loopback; a host's 127.0.0.1 is its own.
    url = f"{web.loopback_url}/f1"
    assert run_cli(work, "publish", str(bundle), "--to", url).code == 0
    run = deploy(work, fleet, url, "--limit", "lab-3")
    assert run.code == 0, run.stderr[-3000:]
    upload = run.steps("lab-3")["upload"]
    assert "pushed release" in upload["reason"] and "could not reach" in upload["reason"]
    assert upload["data"]["fallback"] is True
    assert assert_serving("lab-3") == "f1"


def test_controller_sends_little_per_host_when_hosts_pull(
    fleet: LabFleet, work: Path, web: WebServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The transport's count of what the controller sent (commands, stdin, files), for a
    release the hosts pull, on hosts that already run one (the lab's params, which its
    playbook pushes by an explicit opt-in, and the supervisor are there already)."""
    first = build(work, "n0")
    assert run_cli(work, "publish", str(first), "--to", f"{web.url}/n0").code == 0
    assert deploy(work, fleet, f"{web.url}/n0").code == 0
    bundle = build(work, "n1")
    url = f"{web.url}/n1"
    assert run_cli(work, "publish", str(bundle), "--to", url).code == 0
    monkeypatch.setenv("ROLLOUT_RUNS_DIR", str(work / "runs"))
    for name, value in NO_DOCKER.items():
        monkeypatch.setenv(name, value)
    sent = SentBytes()
    request = app.RolloutRequest(str(fleet.fleet_path), None, FAST[1:], release=url)
    summary = app.run_rollout(request, lambda h: CountingTransport(app.connect(h), sent))
    assert summary.exit_code == 0
    size = sum(e["size"] for e in manifest(bundle)["executables"].values())
    for host in fleet.hosts:
        assert sent.by_host[host.name] < 1_000_000, sent.by_host
    print(f"bytes sent per host: {dict(sent.by_host)}; release {size} bytes")
