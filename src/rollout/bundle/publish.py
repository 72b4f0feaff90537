"""`rollout publish DIR --to URL`: put a checked bundle where hosts can download it.

Targets: `https://...` or `http://...` (one HTTP PUT per file; an `Authorization` header
from $ROLLOUT_PUBLISH_AUTHORIZATION when set), `s3://BUCKET/PREFIX` (boto3, the optional
extra `rollout[s3]`), or a local folder (`file:///path` or a plain path, for a web server's
document root or a shared mount). The manifest goes last, so a reader never finds a
manifest whose executables are not all there yet.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from urllib.parse import urlsplit

from rollout.bundle.local import open_bundle, read_manifest
from rollout.bundle.manifest import MANIFEST, Manifest
from rollout.bundle.s3 import upload_bundle
from rollout.errors import EnvironmentProblem, UserError
from rollout.readfile import open_regular
from rollout.transport.failures import url_failure

AUTH_ENV = "ROLLOUT_PUBLISH_AUTHORIZATION"
TIMEOUT = 60.0


def publish(folder: Path, to: str) -> Manifest:
    open_bundle(folder)  # every executable checked against the manifest first
    manifest = read_manifest(folder)
    scheme = urlsplit(to).scheme
    if scheme in ("http", "https"):
        _put_all(folder, manifest, to)
    elif scheme == "s3":
        upload_bundle(folder, manifest, to)
    elif scheme in ("", "file"):
        _copy_all(folder, manifest, Path(urlsplit(to).path if scheme else to))
    else:
        raise UserError(f"--to {to}: use https://, http://, s3:// or a folder")
    return manifest


def _files(manifest: Manifest) -> list[str]:
    return [*manifest.executables, MANIFEST]


def _copy_all(folder: Path, manifest: Manifest, dest: Path) -> None:
    dest.mkdir(parents=True, exist_ok=True)
    (dest / MANIFEST).unlink(missing_ok=True)
    for name in _files(manifest):
        tmp = dest / f".{name}.partial"
        with open_regular(folder / name, "bundle file") as src, tmp.open("wb") as out:
            shutil.copyfileobj(src, out)
        tmp.replace(dest / name)


def _put_all(folder: Path, manifest: Manifest, base: str) -> None:
    headers = {}
    if os.environ.get(AUTH_ENV):
        headers["Authorization"] = os.environ[AUTH_ENV]
    # Deferred, not for a cycle (requests imports nothing of rollout): only a publish to
    # http(s) uses it, and importing it costs every `rollout` command about 0.25 s at start-up.
    import requests

    with requests.Session() as session:
        for name in _files(manifest):
            url = base.rstrip("/") + "/" + name
            try:
                with open_regular(folder / name, "bundle file") as body:
                    response = session.put(url, data=body, headers=headers, timeout=TIMEOUT)
            except requests.RequestException as e:
                raise url_failure(EnvironmentProblem, url, e) from e
            if response.status_code not in (200, 201, 204):
                raise url_failure(EnvironmentProblem, url, status=response.status_code,
                                  reason=response.reason or "")
