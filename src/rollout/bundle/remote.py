"""A published bundle: its manifest read from a URL; its executables fetched only when a
host cannot download them itself and the controller has to push them."""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING

from rollout.bundle import s3
from rollout.bundle.local import bundle_problems
from rollout.bundle.manifest import MANIFEST, MAX_MANIFEST, Executable, Manifest, parse_manifest
from rollout.bundle.release import Release
from rollout.errors import EnvironmentProblem, UserError
from rollout.host.scripts.fetch import FetchFailed, fetch_file
from rollout.transport.failures import url_failure

TIMEOUT = 30.0  # seconds per connect and per read
MANIFEST_DEADLINE = 60.0  # seconds for the whole manifest, however slowly it trickles

if TYPE_CHECKING:
    import urllib3


def member_url(base: str, name: str) -> str:
    """The URL of one file of the bundle published at `base`."""
    return base.rstrip("/") + "/" + name


def fetch_manifest(base: str) -> Manifest:
    # Deferred, not for a cycle (requests and urllib3 import nothing of rollout): only
    # `--release URL` reads over HTTP, and importing them costs every `rollout` command about
    # 0.25 s of CPU at start-up.
    import requests
    import urllib3

    url = member_url(base, MANIFEST)
    try:
        with requests.get(url, timeout=TIMEOUT, stream=True) as response:
            if response.status_code != 200:
                raise url_failure(UserError, url, status=response.status_code,
                                  reason=response.reason or "")
            body = _read_body(response.raw, url, time.monotonic() + MANIFEST_DEADLINE)
    except (requests.RequestException, urllib3.exceptions.HTTPError) as e:
        raise url_failure(EnvironmentProblem, url, e) from e
    if len(body) > MAX_MANIFEST:
        raise UserError(f"--release {base}: {url} is too large for a manifest")
    return parse_manifest(body.decode("utf-8", "replace"), url)


def _read_body(raw: urllib3.BaseHTTPResponse, url: str, deadline: float) -> bytes:
    """At most MAX_MANIFEST + 1 bytes, by `deadline` (a time.monotonic() value): a server
    that sends a byte every few seconds never trips a per-read timeout, and is cut here."""
    body = b""
    while len(body) <= MAX_MANIFEST:
        if time.monotonic() > deadline:
            raise EnvironmentProblem(f"cannot read the bundle's manifest {url}: not complete "
                                     f"within {MANIFEST_DEADLINE:g} s (the server sends it "
                                     "too slowly)")
        chunk = raw.read1(64 * 1024, decode_content=True)
        if not chunk:
            break
        body += chunk
    return body


def remote_release(base: str, cache: Path) -> Release:
    """The release at `base` (https://, http:// or s3://); hosts download it, so nothing but
    its manifest is read here. Its artifacts' local paths are where `local_copy` would put
    the executables: under `cache` (the controller's cache folder)."""
    manifest = s3.read_manifest(base) if base.startswith("s3://") else fetch_manifest(base)
    return manifest.release_for(str(copy_dir(cache, manifest.release)), source=base.rstrip("/"))


def copy_dir(cache: Path, release_id: str) -> Path:
    """Where the controller keeps its own copy of a published release's executables."""
    return cache / "bundles" / release_id


_copy_lock = threading.Lock()


def local_copy(release: Release, urls: dict[str, str], seconds: float | None = None) -> None:
    """Download the executables once to the controller's cache (for hosts that cannot
    reach the bundle), resumably, each checked against the manifest's sha256; all of it
    within `seconds` (the step's time left; None: no overall deadline)."""
    deadline = None if seconds is None else time.monotonic() + seconds
    with _copy_lock:
        for artifact in release.artifacts:
            path = Path(artifact.local_path)
            path.parent.mkdir(parents=True, exist_ok=True)
            if path.is_file() and not _problems(path, artifact.sha256, artifact.size):
                continue
            try:
                fetch_file(urls[artifact.name], str(path), artifact.sha256, artifact.size,
                           deadline=deadline)
            except FetchFailed as e:
                raise EnvironmentProblem(
                    f"the controller cannot fetch {artifact.name} either: {e}"
                ) from e


def _problems(path: Path, sha256: str, size: int) -> list[str]:
    return bundle_problems(path.parent, {path.name: Executable(sha256=sha256, size=size)})


def release_urls(release: Release) -> dict[str, str]:
    """Where each executable of a published release is downloaded from (an S3 bucket's
    are presigned URLs: the hosts need no credentials)."""
    assert release.source is not None
    if release.source.startswith("s3://"):
        return s3.presigned_urls(release)
    return {a.name: member_url(release.source, a.name) for a in release.artifacts}
