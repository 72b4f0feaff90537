"""Release bundles: the manifest is checked like hostile input; a tampered bundle is refused."""

from __future__ import annotations

import hashlib
import json
from dataclasses import replace
from pathlib import Path

import pytest

from rollout.bundle.local import open_bundle, read_manifest, write_bundle
from rollout.bundle.manifest import MANIFEST, manifest_for, parse_manifest
from rollout.bundle.publish import publish
from rollout.bundle.release import release_id_of
from rollout.bundle.source import is_url, load_release, sets_with_version
from rollout.config.playbook import parse_set_options
from rollout.errors import UserError
from rollout.steps.base import Artifact, Release


def _release(tmp: Path, contents: dict[str, bytes]) -> Release:
    artifacts = []
    for name, data in contents.items():
        path = tmp / "extracted" / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
        artifacts.append(Artifact(name, str(path), hashlib.sha256(data).hexdigest(), len(data)))
    return Release(release_id_of(artifacts), "img:c-1", "v7", tuple(artifacts))


@pytest.fixture
def bundle(tmp_path: Path) -> Path:
    release = _release(tmp_path, {"cuzk-daemon": b"daemon" * 100, "cuzk-bench": b"bench"})
    manifest = manifest_for(release, "sha256:abc", {"VERSION": "v7"}, "deadbeef", "2026-01-01")
    out = tmp_path / "bundle"
    write_bundle(out, release, manifest)
    return out


def test_bundle_round_trip(bundle: Path) -> None:
    release = open_bundle(bundle)
    manifest = read_manifest(bundle)
    assert release.id == manifest.release == release_id_of(release.artifacts)
    assert [a.name for a in release.artifacts] == ["cuzk-daemon", "cuzk-bench"]
    assert release.version == "v7" and release.source is None
    assert all(Path(a.local_path).read_bytes() for a in release.artifacts)
    data = json.loads((bundle / MANIFEST).read_text())
    assert data["build_args"] == {"VERSION": "v7"}
    assert data["source_revision"] == "deadbeef" and data["image_digest"] == "sha256:abc"


def test_tampered_executable_is_refused(bundle: Path) -> None:
    (bundle / "cuzk-bench").write_bytes(b"bencH")  # same size, other bytes
    with pytest.raises(UserError) as e:
        open_bundle(bundle)
    assert e.value.exit_code == 2
    assert "cuzk-bench sha256 differs" in str(e.value) and MANIFEST in str(e.value)


def test_truncated_or_missing_executable_is_refused(bundle: Path) -> None:
    (bundle / "cuzk-daemon").write_bytes(b"daemon")
    (bundle / "cuzk-bench").unlink()
    with pytest.raises(UserError, match="cuzk-daemon is 6 bytes.*cuzk-bench is missing"):
        open_bundle(bundle)


def test_manifest_rewritten_to_match_tampered_file_is_refused(bundle: Path) -> None:
    data = json.loads((bundle / MANIFEST).read_text())
    evil = b"#!/bin/sh\nrm -rf /\n"
    (bundle / "cuzk-bench").write_bytes(evil)
    data["executables"]["cuzk-bench"] = {"sha256": hashlib.sha256(evil).hexdigest(),
                                         "size": len(evil)}
    (bundle / MANIFEST).write_text(json.dumps(data))
    with pytest.raises(UserError, match="not the digest of its executables"):
        open_bundle(bundle)


@pytest.mark.parametrize(
    "change, key",
    [
        ({"executables": {"../../etc/passwd": {"sha256": "0" * 64, "size": 1}}}, "executables"),
        ({"executables": {"x": {"sha256": "$(reboot)", "size": 1}}}, "executables.x.sha256"),
        ({"release": "; rm -rf /"}, "release"),
        ({"format": "rollout-release/9"}, "format"),
        ({"surprise": 1}, "surprise"),
    ],
)
def test_hostile_manifest_values_are_refused(bundle: Path, change: dict, key: str) -> None:
    data = {**json.loads((bundle / MANIFEST).read_text()), **change}
    with pytest.raises(UserError) as e:
        parse_manifest(json.dumps(data), "m.json")
    assert e.value.exit_code == 2 and str(e.value).startswith(f"m.json: {key}")


def test_not_a_bundle(tmp_path: Path) -> None:
    with pytest.raises(UserError, match="no such folder"):
        load_release(str(tmp_path / "nope"), tmp_path)
    with pytest.raises(UserError, match="not a release bundle"):
        load_release(str(tmp_path), tmp_path)


def test_version_comes_from_the_bundle(bundle: Path) -> None:
    release = open_bundle(bundle)
    assert sets_with_version(("a=1",), release) == ("a=1", "version=v7")  # a string as given
    assert parse_set_options(sets_with_version((), replace(release, version="1.10"))) == {
        "version": "1.10"}
    assert sets_with_version(("version=v7",), release) == ("version=v7",)
    with pytest.raises(UserError, match="bundle .* is version v7"):
        sets_with_version(("version=v8",), release)


def test_publish_to_a_folder_checks_first(bundle: Path, tmp_path: Path) -> None:
    dest = tmp_path / "www" / "r1"
    publish(bundle, str(dest))
    assert open_bundle(dest).id == open_bundle(bundle).id
    (bundle / "cuzk-bench").write_bytes(b"bencH")
    with pytest.raises(UserError):
        publish(bundle, f"file://{tmp_path}/www/r2")
    assert not (tmp_path / "www" / "r2").exists()


def test_urls_are_told_from_folders() -> None:
    assert is_url("https://x/y") and is_url("s3://b/p") and is_url("http://10.0.0.1:8080/r")
    assert not is_url("dist/bundle") and not is_url("/abs/bundle")
