"""Bundles in an S3 bucket (the `s3` extra): publish, read the manifest back, and hand
hosts presigned URLs. moto stands in for the bucket; nothing leaves this process."""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit

import pytest

from rollout.bundle.local import write_bundle
from rollout.bundle.manifest import manifest_for
from rollout.bundle.publish import publish
from rollout.bundle.release import release_id_of
from rollout.bundle.remote import release_urls, remote_release
from rollout.errors import UserError
from rollout.steps.base import Artifact, Release

boto3 = pytest.importorskip("boto3")
moto = pytest.importorskip("moto")


@pytest.fixture
def bucket(monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    for name, value in {"AWS_ACCESS_KEY_ID": "test", "AWS_SECRET_ACCESS_KEY": "test",
                        "AWS_DEFAULT_REGION": "us-east-1"}.items():
        monkeypatch.setenv(name, value)
    monkeypatch.delenv("AWS_ENDPOINT_URL", raising=False)
    with moto.mock_aws():
        boto3.client("s3").create_bucket(Bucket="releases")
        yield "releases"


def _bundle(tmp: Path) -> Path:
    data = b"daemon bytes"
    (tmp / "x").mkdir()
    (tmp / "x" / "cuzk-daemon").write_bytes(data)
    artifacts = (Artifact("cuzk-daemon", str(tmp / "x" / "cuzk-daemon"),
                          hashlib.sha256(data).hexdigest(), len(data)),)
    release = Release(release_id_of(artifacts), "img", "v1", artifacts)
    write_bundle(tmp / "b", release, manifest_for(release, None, {}, None, "now"))
    return tmp / "b"


def test_publish_to_s3_and_deploy_from_it(bucket: str, tmp_path: Path) -> None:
    bundle = _bundle(tmp_path)
    url = f"s3://{bucket}/cuzk/v1"
    manifest = publish(bundle, url)
    keys = {o["Key"] for o in boto3.client("s3").list_objects_v2(Bucket=bucket)["Contents"]}
    assert keys == {"cuzk/v1/cuzk-daemon", "cuzk/v1/manifest.json"}
    release = remote_release(url, tmp_path)
    assert release.id == manifest.release and release.source == url
    (presigned,) = release_urls(release).values()
    parts = urlsplit(presigned)
    assert parts.scheme == "https" and parts.path.endswith("/cuzk/v1/cuzk-daemon")
    assert "Signature" in parts.query or "X-Amz-Signature" in parts.query


def test_s3_url_needs_a_bucket() -> None:
    with pytest.raises(UserError, match="s3://BUCKET/PREFIX"):
        from rollout.bundle.s3 import split

        split("s3:///nobucket")
