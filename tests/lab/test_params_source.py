"""Proof parameters from the real source, on the lab fleet (issue 17): a host with the files
in curio's folder uses them in place; a host missing one downloads it from a mirror that
serves by CID (the lab's web server, on the lab network); a truncated and a corrupted file
are refused by size and by digest before anything is stopped. Nothing is pushed."""

from __future__ import annotations

import hashlib
import io
import tarfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from rollout import lab
from rollout.config.params_manifest import ManifestFile, files_for
from rollout.lab.engine import ensure_engine
from rollout.lab.web import ROOT, WebServer, start_web_server, stop_web_server

from .conftest import POREP_PARAMS, LabFleet
from .rollout_helpers import REPO, CliRun, assert_serving, daemon_pid, fresh_fleet, run_cli, sh
from .rollout_helpers import rollout_args as args_for

pytestmark = pytest.mark.lab
PARAMS = "/data/zk/params"
CURIO = "/var/tmp/filecoin-proof-parameters"
VK = POREP_PARAMS.removesuffix(".params") + ".vk"
LOCAL = REPO / "playbooks" / "files" / "params"
FAST = (
    "--set", "ready_timeout=15", "--set", "stop_grace=3", "--set", "drain_deadline=30",
)  # fmt: skip


@pytest.fixture(scope="module")
def fleet(lab_fleet: LabFleet) -> LabFleet:
    return fresh_fleet(lab_fleet, ("lab-1", "lab-2"))


@pytest.fixture(scope="module")
def mirror(fleet: LabFleet) -> Iterator[WebServer]:
    """The lab's web server, serving each lab param file at /ipfs/<its CID>."""
    server = start_web_server()
    by_cid = {f"ipfs/{f.cid}": (LOCAL / f.name).read_bytes() for f in files_for("lab-porep")}
    ensure_engine().containers.get(server.container).put_archive(ROOT, tar_of(by_cid))
    yield server
    stop_web_server(server)


@pytest.fixture(scope="module")
def work(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("params-source")


def tar_of(files: dict[str, bytes]) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.size, info.mode = len(data), 0o644
            tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def put_on(host: str, folder: str, names: list[str]) -> None:
    sh(host, f"mkdir -p {folder}")
    container = ensure_engine().containers.get(f"{lab.lab_prefix()}-{host}")
    container.put_archive(folder, tar_of({n: (LOCAL / n).read_bytes() for n in names}))


def deploy(work: Path, fleet: LabFleet, mirror: WebServer, host: str, version: str) -> CliRun:
    """A rollout of one host that pushes nothing: missing files come from the mirror."""
    return run_cli(work, *args_for(fleet.fleet_path, version), *FAST, "--limit", host,
                   "--set", "params_source=", "--set", f"params_gateway={mirror.url}")


def ipfs_gets(mirror: WebServer) -> list[str]:
    return [r["path"] for r in mirror.requests()
            if r["method"] == "GET" and r["path"].startswith("/ipfs/")]


def entry(name: str) -> ManifestFile:
    return next(f for f in files_for("lab-porep") if f.name == name)


def test_params_in_curios_folder_are_used_in_place(
    fleet: LabFleet, mirror: WebServer, work: Path
) -> None:
    sh("lab-1", f"rm -rf {PARAMS} {CURIO}")
    put_on("lab-1", CURIO, [POREP_PARAMS, VK])
    run = deploy(work, fleet, mirror, "lab-1", "in-place")
    assert run.code == 0, run.stderr[-3000:]
    reason = run.steps("lab-1")["preflight"]["reason"]
    assert f"{POREP_PARAMS} reused in place from {CURIO}/{POREP_PARAMS}, verified" in reason
    assert f"{VK} reused in place from {CURIO}/{VK}, verified" in reason
    for name in (POREP_PARAMS, VK):  # linked, not copied
        assert sh("lab-1", f"readlink {PARAMS}/{name}").strip() == f"{CURIO}/{name}"
    assert ipfs_gets(mirror) == []  # nothing downloaded
    assert assert_serving("lab-1") == "in-place"  # its proof read the params through them


def test_a_missing_file_is_downloaded_from_the_mirror_by_cid(
    fleet: LabFleet, mirror: WebServer, work: Path
) -> None:
    sh("lab-2", f"rm -rf {PARAMS} {CURIO}")
    put_on("lab-2", PARAMS, [VK])  # the .params file is the one missing
    before = len(ipfs_gets(mirror))
    run = deploy(work, fleet, mirror, "lab-2", "downloaded")
    assert run.code == 0, run.stderr[-3000:]
    wanted = entry(POREP_PARAMS)
    reason = run.steps("lab-2")["preflight"]["reason"]
    assert f"{POREP_PARAMS} downloaded ({wanted.size} bytes), verified" in reason, reason
    assert f"{VK} present, verified" in reason
    assert ipfs_gets(mirror)[before:] == [f"/ipfs/{wanted.cid}"]
    on_host = sh("lab-2", f"cat {PARAMS}/{POREP_PARAMS} | sha256sum").split()[0]
    assert on_host == hashlib.sha256((LOCAL / POREP_PARAMS).read_bytes()).hexdigest()
    assert sh("lab-2", f"ls -a {PARAMS} | grep -c partial || true").strip() == "0"
    assert assert_serving("lab-2") == "downloaded"


@pytest.mark.parametrize("damage", ["truncated", "corrupted"])
def test_a_damaged_file_is_refused_before_the_stop(
    fleet: LabFleet, mirror: WebServer, work: Path, damage: str
) -> None:
    sh("lab-2", f"rm -rf {CURIO}")
    put_on("lab-2", PARAMS, [POREP_PARAMS, VK])  # a good copy, then damaged in place
    path = f"{PARAMS}/{POREP_PARAMS}"
    if damage == "truncated":
        sh("lab-2", f"truncate -s 1000 {path}")
    else:
        sh("lab-2", f"printf X | dd of={path} bs=1 seek=4096 count=1 conv=notrunc 2>/dev/null")
    pid = daemon_pid("lab-2")
    run = deploy(work, fleet, mirror, "lab-2", f"never-{damage}")
    assert run.code == 1
    preflight = run.steps("lab-2")["preflight"]
    assert preflight["status"] == "failed", preflight
    wanted = entry(POREP_PARAMS)
    if damage == "truncated":
        figures = f"{path}: 1000 bytes, expected {wanted.size}"
    else:
        data = bytearray((LOCAL / POREP_PARAMS).read_bytes())
        data[4096] = ord("X")
        figures = f"{path}: blake2b {hashlib.blake2b(data).hexdigest()[:32]}, " \
                  f"expected {wanted.digest}"
    assert figures in preflight["reason"], preflight["reason"]
    assert "stop" not in run.steps("lab-2") and daemon_pid("lab-2") == pid
    assert sh("lab-2", f"stat -c %s {path}").strip() == ("1000" if damage == "truncated"
                                                         else str(wanted.size))  # kept
