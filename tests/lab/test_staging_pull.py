"""Staging ahead for pulled releases (issue 29): a `--release URL` rollout of 3 hosts in
batches [1, 2]; both later hosts download the release into their staging folder while the
canary runs, and have it before the canary validates (read on the hosts while the canary
is parked before its validate: a state, not a timing); at their turn the upload installs
that copy, with no second download."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from rollout.lab.web import WebServer, start_web_server, stop_web_server

from .conftest import LabFleet
from .rollout_helpers import FAST_KNOBS, REPO, assert_serving, fresh_fleet, run_cli, sh, start_cli

pytestmark = pytest.mark.lab
NO_DOCKER = {"DOCKER_HOST": "unix:///nonexistent/docker.sock"}


@pytest.fixture(scope="module")
def web(lab_fleet: LabFleet) -> Iterator[WebServer]:
    server = start_web_server()
    yield server
    stop_web_server(server)


def _staged_sums(host: str, release: str) -> dict[str, str]:
    """name: sha256 of each file in the host's staging folder of `release`."""
    out = sh(host, f"cd /data/rollout/staging/{release} 2>/dev/null && sha256sum -- *; true")
    return {line.split()[1]: line.split()[0] for line in out.splitlines() if line.strip()}


def _build(tmp_path: Path, version: str) -> Path:
    bundle = tmp_path / f"bundle-{version}"
    built = run_cli(tmp_path, "build", "--out", str(bundle), "--playbook",
                    str(REPO / "playbooks" / "lab.yaml"), "--set", f"version={version}")
    assert built.code == 0, built.stderr[-3000:]
    return bundle


def _rollout(fleet: LabFleet, release: str) -> tuple[str, ...]:
    return ("rollout", "--hosts", str(fleet.fleet_path), "--release", release,
            "--set", f"lab_knobs={FAST_KNOBS}")


def test_later_hosts_have_the_pulled_release_before_the_canary_validates(
    lab_fleet: LabFleet, web: WebServer, tmp_path: Path
) -> None:
    fleet = fresh_fleet(lab_fleet)  # then serving a first release, pushed
    first = run_cli(tmp_path, *_rollout(fleet, str(_build(tmp_path, "s0"))), env=NO_DOCKER)
    assert first.code == 0, first.stderr[-3000:]
    bundle = _build(tmp_path, "s1")
    manifest = json.loads((bundle / "manifest.json").read_text())
    release, files = manifest["release"], manifest["executables"]
    url = f"{web.url}/s1"
    assert run_cli(tmp_path, "publish", str(bundle), "--to", url).code == 0

    park = tmp_path / "park"
    park.mkdir()
    env = {**NO_DOCKER, "ROLLOUT_FAILPOINTS": "park-before-validate@lab-1",
           "ROLLOUT_PARK_DIR": str(park)}
    run = start_cli(tmp_path, *_rollout(fleet, url), env=env)
    run.wait_for(lambda e: e["kind"] == "parked" and e["host"] == "lab-1", timeout=300)
    for host in ("lab-2", "lab-3"):  # the canary holds before its validate meanwhile
        staged = run.wait_for(lambda e, h=host: e["kind"] == "staged" and e["host"] == h,
                              timeout=300)
        assert staged["status"] == "ok" and staged["data"]["source"] == url, staged
        assert _staged_sums(host, release) == {n: f["sha256"] for n, f in files.items()}
    assert not any(e["kind"] == "step_start" and e["step"] == "validate" for e in run.events())
    (park / "park-before-validate.go").touch()

    done = run.finish()
    assert done.code == 0, done.stderr[-3000:]
    for host in ("lab-2", "lab-3"):
        upload = done.steps(host)["upload"]
        assert upload["data"]["staged"] is True, upload
        assert "during the canary" in upload["reason"]
        assert not _staged_sums(host, release)  # installed by a rename: nothing left there
    for host in ("lab-1", "lab-2", "lab-3"):
        assert assert_serving(host) == "s1"
    wanted = {f"/s1/{n}" for n in files}  # each executable once a host: no second download
    gets = [r["path"] for r in web.requests() if r["method"] == "GET" and r["path"] in wanted]
    assert sorted(gets) == sorted(path for path in wanted for _ in range(3)), gets
