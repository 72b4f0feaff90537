"""Preflight's proof-parameter check and staging, run against this machine (LocalTransport):
missing files are listed, a resumed copy is checked against its digest, the PCE must fit."""

from __future__ import annotations

import hashlib
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from rollout.config.sections import ParamsSpec
from rollout.errors import StepFailed
from rollout.host.layout import Layout
from rollout.steps.base import HostContext
from rollout.steps.params import check_params
from rollout.transport.local import LocalTransport

NAME = "v28-test.params"


def context(tmp: Path, **params: Any) -> HostContext:
    cache = tmp / "cache"
    settings = SimpleNamespace(
        params=ParamsSpec(**params), daemon=SimpleNamespace(param_cache=str(cache))
    )
    return HostContext(SimpleNamespace(name="h", vars={}), LocalTransport("h"),
                       Layout(str(tmp / "root")), settings=settings)


def source(tmp: Path, data: bytes) -> Path:
    folder = tmp / "source"
    folder.mkdir(exist_ok=True)
    (folder / NAME).write_bytes(data)
    (folder / "v.vk").write_bytes(b"vk")
    return folder


def test_missing_files_are_listed_when_there_is_no_source(tmp_path: Path) -> None:
    ctx = context(tmp_path, files=[{"name": NAME, "size": 10}, {"name": "v.vk"}])
    (tmp_path / "cache").mkdir()
    (tmp_path / "cache" / NAME).write_bytes(b"12345")
    with pytest.raises(StepFailed) as err:
        check_params(ctx)
    assert f"{NAME} (5 bytes, expected 10 bytes)" in str(err.value)
    assert "v.vk (missing)" in str(err.value) and "params.source" in str(err.value)


def test_present_files_pass_and_nothing_is_copied(tmp_path: Path) -> None:
    ctx = context(tmp_path, files=[{"name": NAME, "size": 3}])
    (tmp_path / "cache").mkdir()
    (tmp_path / "cache" / NAME).write_bytes(b"abc")
    assert check_params(ctx) == f"params in {tmp_path / 'cache'}: 1 file(s) present"


def test_a_partial_copy_is_resumed_and_its_digest_checked(tmp_path: Path) -> None:
    data = bytes(range(256)) * 64
    folder = source(tmp_path, data)
    ctx = context(tmp_path, source=str(folder), files=[
        {"name": NAME, "size": len(data), "sha256": hashlib.sha256(data).hexdigest()},
        {"name": "v.vk"}])  # fmt: skip
    (tmp_path / "cache").mkdir()
    (tmp_path / "cache" / f"{NAME}.partial").write_bytes(data[:1000])
    note = check_params(ctx)
    assert "resumed at 1000 bytes, sha256 verified" in note
    assert (tmp_path / "cache" / NAME).read_bytes() == data
    assert not (tmp_path / "cache" / f"{NAME}.partial").exists()


def test_a_partial_that_is_not_a_prefix_fails_the_digest_and_is_dropped(tmp_path: Path) -> None:
    data = b"x" * 5000
    folder = source(tmp_path, data)
    ctx = context(tmp_path, source=str(folder), files=[{"name": NAME, "size": len(data)}])
    (tmp_path / "cache").mkdir()
    (tmp_path / "cache" / f"{NAME}.partial").write_bytes(b"y" * 100)
    with pytest.raises(StepFailed, match="sha256"):
        check_params(ctx)  # no sha256 in the manifest: the local source's is used
    assert not (tmp_path / "cache" / f"{NAME}.partial").exists()
    assert not (tmp_path / "cache" / NAME).exists()
    check_params(ctx)
    assert (tmp_path / "cache" / NAME).read_bytes() == data


def test_no_room_for_the_pce_file_fails_before_anything_is_copied(tmp_path: Path) -> None:
    ctx = context(tmp_path, files=[{"name": NAME}], pce_bytes="1000000GiB")
    (tmp_path / "cache").mkdir()
    (tmp_path / "cache" / NAME).write_bytes(b"abc")
    with pytest.raises(StepFailed, match="for the PCE file"):
        check_params(ctx)
    (tmp_path / "cache" / "pce-porep-32g.bin").write_bytes(b"pce")  # already written
    assert "present" in check_params(ctx)
