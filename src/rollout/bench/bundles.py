"""`inv bench` figures for release bundles: a large release to many lab hosts, pushed from
the controller against pulled by the hosts from the lab's web server, with the bytes the
controller sent to each host (its transport's count) and every host's result."""

from __future__ import annotations

import hashlib
import os
import shutil
import time
from pathlib import Path
from typing import Any

from rollout import lab
from rollout.bundle.local import open_bundle, read_manifest, write_bundle
from rollout.bundle.manifest import Executable
from rollout.bundle.publish import publish
from rollout.bundle.release import Artifact, Release, release_id_of
from rollout.commands import app
from rollout.commands.fleet import connect
from rollout.lab.web import start_web_server, stop_web_server
from rollout.transport.counting import CountingTransport, SentBytes

PAD_NAME = "cuzk-kernels.bin"  # what a CUDA build's fat binaries weigh, as one file
FAST = "{pool_mib: 32, load_secs: 0.3, drain_mib_per_sec: 256, prove_secs: 0.1}"


def padded_bundle(small: Path, out: Path, mib: int, size: int | None = None) -> Path:
    """The small stand-in bundle plus `mib` MiB (or `size` bytes) of random bytes: a release
    of that weight, and a new release id each time. Written and hashed 1 MiB at a time: a
    child the bench then starts inherits this process's peak RSS as its own ru_maxrss
    (Linux keeps the larger across fork and exec), so reading the pad whole here showed up
    as 100 MiB more in the rollout's reported peak RSS."""
    release = open_bundle(small)
    pad = out.parent / f"{out.name}-{PAD_NAME}"
    size = mib << 20 if size is None else size
    hashed = hashlib.sha256()
    with pad.open("wb") as f:  # never the whole file in memory
        for start in range(0, size, 1 << 20):
            chunk = os.urandom(min(1 << 20, size - start))
            hashed.update(chunk)
            f.write(chunk)
    digest = hashed.hexdigest()
    artifacts = (*release.artifacts, Artifact(PAD_NAME, str(pad), digest, size))
    big = Release(release_id_of(artifacts), release.image, release.version, artifacts)
    executables = {**read_manifest(small).executables,
                   PAD_NAME: Executable(sha256=digest, size=size)}
    manifest = read_manifest(small).model_copy(
        update={"release": big.id, "executables": executables})
    write_bundle(out, big, manifest)
    pad.unlink()
    return out


def _timed(fleet: Path, release: str) -> dict[str, Any]:
    sent = SentBytes()
    request = app.RolloutRequest(str(fleet), None, (f"lab_knobs={FAST}",), release=release)
    started = time.monotonic()
    summary = app.run_rollout(request, lambda h: CountingTransport(connect(h), sent))
    return {
        "seconds": round(time.monotonic() - started, 2),
        "validated": sum(1 for o in summary.outcomes.values() if o.succeeded),
        "max_bytes_sent_per_host": max(sent.by_host.values()),
    }


def bench_bundles(work: Path, hosts: int = 8, mib: int = 100) -> dict[str, Any]:
    """Bring up `hosts` lab hosts and a web server; deploy two `mib` MiB releases, one
    pushed, one pulled. Leaves the lab down."""
    # 4 GiB hosts: room for two 100 MiB releases on each besides the daemon.
    fleet = lab.up(hosts, memory="4g")
    server = start_web_server()
    try:
        small = work / "small"
        app.run_build(None, ("version=bench-bundle",), small)
        pushed = _timed(fleet, str(padded_bundle(small, work / "push", mib)))
        pulled_bundle = padded_bundle(small, work / "pull", mib)
        url = f"{server.url}/bench"
        publish(pulled_bundle, url)
        pulled = _timed(fleet, url)
    finally:
        stop_web_server(server)
        lab.down()
        shutil.rmtree(work, ignore_errors=True)
    key = f"bundle_{mib}mib_{hosts}_hosts"
    return {
        f"{key}_pushed_s": pushed["seconds"],
        f"{key}_pulled_s": pulled["seconds"],
        f"{key}_pushed_validated": pushed["validated"],
        f"{key}_pulled_validated": pulled["validated"],
        f"{key}_pushed_controller_bytes_per_host_max": pushed["max_bytes_sent_per_host"],
        f"{key}_pulled_controller_bytes_per_host_max": pulled["max_bytes_sent_per_host"],
    }
