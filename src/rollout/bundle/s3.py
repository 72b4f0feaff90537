"""Bundles in an S3-compatible bucket, through boto3 (rollout's optional extra `s3`).

`s3://BUCKET/PREFIX` names the bundle's folder. Credentials and the endpoint come from
boto3's own chain (AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_ENDPOINT_URL for MinIO,
Ceph or R2, ~/.aws). Hosts need no credentials: the controller gives each a presigned
GET URL per executable, valid for PRESIGN_SECONDS.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from rollout.bundle.manifest import MANIFEST, MAX_MANIFEST, Manifest, parse_manifest
from rollout.bundle.release import Release
from rollout.errors import EnvironmentProblem, UserError

PRESIGN_SECONDS = 6 * 3600


def _client() -> Any:
    try:
        import boto3
    except ImportError as e:
        raise EnvironmentProblem(
            "s3:// needs boto3: install rollout with its s3 extra (pip install './[s3]' in "
            "rollout's checkout; the distribution is cuzk-rollout), or use an https:// location"
        ) from e
    return boto3.client("s3")


def split(url: str) -> tuple[str, str]:
    """s3://bucket/some/prefix -> ("bucket", "some/prefix")."""
    parts = urlsplit(url)
    if parts.scheme != "s3" or not parts.netloc:
        raise UserError(f"{url}: expected s3://BUCKET/PREFIX")
    return parts.netloc, parts.path.strip("/")


def _key(prefix: str, name: str) -> str:
    return f"{prefix}/{name}" if prefix else name


def _errors() -> tuple[type[BaseException], ...]:
    from botocore.exceptions import BotoCoreError, ClientError

    return (BotoCoreError, ClientError)


def read_manifest(url: str) -> Manifest:
    bucket, prefix = split(url)
    client = _client()
    try:
        body = client.get_object(Bucket=bucket, Key=_key(prefix, MANIFEST))["Body"].read(
            MAX_MANIFEST + 1)
    except _errors() as e:
        raise EnvironmentProblem(f"cannot read {url}/{MANIFEST}: {e}") from e
    if len(body) > MAX_MANIFEST:
        raise UserError(f"--release {url}: its {MANIFEST} is too large for a manifest")
    return parse_manifest(body.decode("utf-8", "replace"), f"{url.rstrip('/')}/{MANIFEST}")


def presigned_urls(release: Release) -> dict[str, str]:
    assert release.source is not None
    bucket, prefix = split(release.source)
    client = _client()
    return {
        a.name: str(
            client.generate_presigned_url(
                "get_object",
                Params={"Bucket": bucket, "Key": _key(prefix, a.name)},
                ExpiresIn=PRESIGN_SECONDS,
            )
        )
        for a in release.artifacts
    }


def upload_bundle(folder: Path, manifest: Manifest, url: str) -> None:
    """The executables, then the manifest: a reader never sees a manifest without its files."""
    bucket, prefix = split(url)
    client = _client()
    try:
        for name in manifest.executables:
            client.upload_file(str(folder / name), bucket, _key(prefix, name))
        client.upload_file(str(folder / MANIFEST), bucket, _key(prefix, MANIFEST))
    except _errors() as e:
        raise EnvironmentProblem(f"cannot publish to {url}: {e}") from e
