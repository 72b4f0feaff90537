"""A bundle holds regular files, and what is uploaded is what was hashed: a link, a FIFO
or a folder in a bundle is refused before any host is touched, and the bytes a host gets
are read from the one descriptor whose bytes were found to be the release's."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path
from typing import Any

import pytest
from contexts import AgentTransport, host_context, small_host

from rollout.bundle.local import open_bundle, write_bundle
from rollout.bundle.manifest import MANIFEST, manifest_for
from rollout.bundle.release import release_id_of
from rollout.commands.app import RolloutRequest, run_rollout
from rollout.errors import StepFailed, UserError
from rollout.host.layout import Layout
from rollout.steps.base import Artifact, HostContext, Release
from rollout.steps.decision import Action
from rollout.steps.kinds.upload import apply as upload
from rollout.transport.base import LocalFile, Progress

BENCH = b"bench-" * 1000
SECRET = b"-----BEGIN OPENSSH PRIVATE KEY-----\nsecret\n"


@pytest.fixture
def bundle(tmp_path: Path) -> Path:
    """A bundle whose cuzk-bench holds exactly SECRET's bytes: a link to the secret would
    pass a check that follows links."""
    artifacts = []
    for name, data in {"cuzk-daemon": b"daemon" * 100, "cuzk-bench": SECRET}.items():
        path = tmp_path / "extracted" / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
        artifacts.append(Artifact(name, str(path), hashlib.sha256(data).hexdigest(), len(data)))
    release = Release(release_id_of(artifacts), "img:c-1", "v7", tuple(artifacts))
    out = tmp_path / "bundle"
    write_bundle(out, release, manifest_for(release, None, {}, None, "2026-01-01"))
    (tmp_path / "secret").write_bytes(SECRET)
    return out


def make(kind: str, path: Path, secret: Path) -> None:
    path.unlink()
    if kind == "link":
        path.symlink_to(secret)
    elif kind == "fifo":
        os.mkfifo(path)
    else:
        path.mkdir()


@pytest.mark.timeout(20)
@pytest.mark.parametrize("kind, says", [("link", "is a link"), ("fifo", "is a FIFO"),
                                        ("folder", "is a folder")])
def test_an_executable_that_is_not_a_regular_file_is_refused(
        bundle: Path, tmp_path: Path, kind: str, says: str) -> None:
    make(kind, bundle / "cuzk-bench", tmp_path / "secret")
    with pytest.raises(UserError) as refused:
        open_bundle(bundle)
    assert refused.value.exit_code == 2
    assert f"cuzk-bench {says}: a bundle holds regular files only" in str(refused.value)
    assert MANIFEST in str(refused.value) and "secret" not in str(refused.value)


def test_a_manifest_that_is_a_link_is_refused(bundle: Path, tmp_path: Path) -> None:
    (tmp_path / "elsewhere.json").write_bytes((bundle / MANIFEST).read_bytes())
    (bundle / MANIFEST).unlink()
    (bundle / MANIFEST).symlink_to(tmp_path / "elsewhere.json")
    with pytest.raises(UserError, match="bundle manifest is a link") as refused:
        open_bundle(bundle)
    assert refused.value.exit_code == 2


def test_a_bundle_with_a_link_is_refused_before_any_host_is_touched(
        bundle: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    make("link", bundle / "cuzk-bench", tmp_path / "secret")
    fleet = tmp_path / "fleet.yaml"
    fleet.write_text("hosts:\n  - {name: gpu1, address: 127.0.0.1, port: 2222}\n")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    touched: list[Any] = []

    def connect(*args: Any, **kwargs: Any) -> Any:
        touched.append(args)
        raise AssertionError("a host was touched")

    with pytest.raises(UserError, match="cuzk-bench is a link") as refused:
        run_rollout(RolloutRequest(hosts=str(fleet), release=str(bundle)), connect=connect)
    assert refused.value.exit_code == 2 and touched == []


class Recording(AgentTransport):
    """A local 'host' that records what it was sent; `before_send(name)` runs as the send
    of each file starts."""

    def __init__(self, name: str) -> None:
        super().__init__(name)
        self.sent: dict[str, bytes] = {}
        self.before_send: Any = None

    def put(self, local_path: LocalFile, remote_path: str, resume: bool = False,
            progress: Progress | None = None) -> None:
        if self.before_send is not None:
            self.before_send(Path(remote_path).name)
        super().put(local_path, remote_path, resume, progress)
        self.sent[Path(remote_path).name] = Path(remote_path).read_bytes()


def context(tmp_path: Path, transport: Recording, release: Release) -> HostContext:
    return host_context(small_host("h1"), transport, Layout(str(tmp_path / "data")),
                        release=release)


def replace_file(path: Path, data: bytes) -> None:
    """`path` replaced by another file (a rename: a new inode), as an attacker who can
    write the bundle's folder would."""
    path.with_name("new").write_bytes(data)
    os.replace(path.with_name("new"), path)


@pytest.mark.parametrize("swap", ["other bytes", "link"])
def test_an_executable_changed_after_the_check_is_not_sent(
        bundle: Path, tmp_path: Path, swap: str) -> None:
    release = open_bundle(bundle)
    bench = bundle / "cuzk-bench"
    if swap == "link":
        make("link", bench, tmp_path / "secret")
    else:
        replace_file(bench, SECRET.upper())
    host = Recording("h1")
    with pytest.raises(StepFailed, match="cuzk-bench not sent") as failed:
        upload(context(tmp_path, host, release), Action("upload"))
    assert not failed.value.retryable
    assert "cuzk-bench" not in host.sent
    assert list((tmp_path / "data" / "releases").iterdir()) == []  # nothing left on the host


def test_the_bytes_sent_are_the_bytes_hashed_even_when_the_file_is_replaced(
        bundle: Path, tmp_path: Path) -> None:
    release = open_bundle(bundle)
    bench = bundle / "cuzk-bench"
    host = Recording("h1")
    host.before_send = lambda name: name == "cuzk-bench" and replace_file(bench, b"x" * 43)
    result = upload(context(tmp_path, host, release), Action("upload"))
    assert result.status == "changed"
    assert host.sent["cuzk-bench"] == SECRET  # the file as hashed, not what replaced it
    assert bench.read_bytes() == b"x" * 43
    on_host = tmp_path / "data" / "releases" / release.id / "cuzk-bench"
    assert on_host.read_bytes() == SECRET
