"""The build context as docker sees it: .dockerignore honoured, cargo's target/ never read,
and a dry run that hashes nothing (a 3 GiB file in target/ cost 26 s and 6.3 GB to hash)."""

from __future__ import annotations

import builtins
import io
import os
import tarfile
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from rollout.bundle import context as buildcontext
from rollout.steps import image

BIG = 3 * 1024**3


@pytest.fixture()
def opened(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    """Every path the code under test opens (builtins.open, io.open and os.open)."""
    seen: list[str] = []
    real_open, real_os_open = builtins.open, os.open

    def record(file: Any, *args: Any, **kwargs: Any) -> Any:
        if isinstance(file, (str, os.PathLike)):
            seen.append(os.fspath(file))
        return real_open(file, *args, **kwargs)

    def record_os(path: Any, *args: Any, **kwargs: Any) -> int:
        seen.append(os.fspath(path))
        return real_os_open(path, *args, **kwargs)

    monkeypatch.setattr(builtins, "open", record)
    monkeypatch.setattr(io, "open", record)
    monkeypatch.setattr(os, "open", record_os)
    yield seen


def checkout(tmp_path: Path, dockerignore: str | None = "node_modules\n") -> Path:
    """A curio-like checkout after `make cuzk`: sources, a 3 GiB sparse file in
    extern/cuzk/target/, a folder .dockerignore leaves out."""
    ctx = tmp_path / "curio"
    (ctx / "extern/cuzk/src").mkdir(parents=True)
    (ctx / "extern/cuzk/src/main.rs").write_text("fn main() {}\n")
    (ctx / "extern/cuzk/Cargo.toml").write_text("[workspace]\n")
    target = ctx / "extern/cuzk/target/release"
    target.mkdir(parents=True)
    with open(target / "cuzk-daemon", "wb") as f:
        f.truncate(BIG)  # sparse: no disk, but 3 GiB to read
    (ctx / "node_modules/pkg").mkdir(parents=True)
    (ctx / "node_modules/pkg/index.js").write_text("secret\n")
    if dockerignore is not None:
        (ctx / ".dockerignore").write_text(dockerignore)
    return ctx


def dockerfile(tmp_path: Path) -> Path:
    path = tmp_path / "docker" / "cuzk.Dockerfile"
    path.parent.mkdir(exist_ok=True)
    path.write_text("FROM scratch\nCOPY extern/cuzk /src\n")
    return path


def spec(ctx: Path, df: Path, **extra: Any) -> Any:
    args = {"RUNTIME_BASE": "ubuntu:22.04", **extra}
    return SimpleNamespace(context=ctx, dockerfile=df, tag="rollout/cuzk:v1",
                           build_args=lambda: dict(args))


def read_under(seen: list[str], *folders: str) -> list[str]:
    return [p for p in seen if any(f"/{f}/" in p or p.endswith(f"/{f}") for f in folders)]


def test_target_and_ignored_folders_are_not_sent(tmp_path: Path) -> None:
    ctx = checkout(tmp_path)
    names = [e.path for e in buildcontext.included(ctx, dockerfile(tmp_path))]
    assert "extern/cuzk/src/main.rs" in names and ".dockerignore" in names
    assert not [n for n in names if "target" in n.split("/") or n.startswith("node_modules")]


def test_target_is_left_out_without_a_dockerignore(tmp_path: Path) -> None:
    ctx = checkout(tmp_path, dockerignore=None)
    names = [e.path for e in buildcontext.included(ctx, dockerfile(tmp_path))]
    assert "node_modules/pkg/index.js" in names  # nothing ignores it here
    assert not [n for n in names if "target" in n.split("/")]


def test_a_dockerignore_line_takes_a_target_folder_back(tmp_path: Path) -> None:
    ctx = checkout(tmp_path, dockerignore="!docs/target\n")
    (ctx / "docs/target").mkdir(parents=True)
    (ctx / "docs/target/page.md").write_text("a folder that happens to be named target\n")
    names = [e.path for e in buildcontext.included(ctx, dockerfile(tmp_path))]
    assert "docs/target/page.md" in names
    assert not [n for n in names if n.startswith("extern/cuzk/target")]


def test_the_content_tag_reads_no_file_under_target_or_an_ignored_folder(
    tmp_path: Path, opened: list[str]
) -> None:
    ctx, df = checkout(tmp_path), dockerfile(tmp_path)
    opened.clear()  # the checkout's own writes
    tag = image.content_tag(spec(ctx, df), tmp_path / "cache")
    assert tag.startswith("rollout/cuzk:c-")
    assert read_under(opened, "target", "node_modules") == []
    assert str(ctx / "extern/cuzk/src/main.rs") in opened  # the sources are what it hashes


def test_the_tag_follows_the_sources_not_target(tmp_path: Path) -> None:
    ctx, df = checkout(tmp_path), dockerfile(tmp_path)
    first = image.content_tag(spec(ctx, df), tmp_path / "cache")
    (ctx / "extern/cuzk/target/release/more").write_bytes(b"x" * 100)
    (ctx / "node_modules/pkg/index.js").write_text("changed\n")
    assert image.content_tag(spec(ctx, df), tmp_path / "cache") == first
    (ctx / "extern/cuzk/src/main.rs").write_text("fn main() { changed() }\n")
    assert image.content_tag(spec(ctx, df), tmp_path / "cache2") != first
    assert image.content_tag(spec(ctx, df, CUDA_ARCHS="120"), tmp_path / "cache3") != first


def test_a_dry_run_reads_no_file_of_the_context(tmp_path: Path, opened: list[str]) -> None:
    ctx, df = checkout(tmp_path), dockerfile(tmp_path)
    cache = tmp_path / "cache"
    opened.clear()
    assert image.known_tag(spec(ctx, df), cache) is None  # nothing built yet: no digest
    summary = image.context_summary(spec(ctx, df))
    assert summary.startswith("3 file(s), 38B")  # main.rs, Cargo.toml and .dockerignore
    read = [p for p in opened if p.startswith(str(ctx)) and not p.endswith(".dockerignore")]
    assert read == []  # names and sizes only: the .dockerignore is the one file it reads


def test_a_dry_run_finds_the_tag_an_earlier_build_hashed(tmp_path: Path) -> None:
    ctx, df, cache = checkout(tmp_path), dockerfile(tmp_path), tmp_path / "cache"
    tag = image.content_tag(spec(ctx, df), cache)
    assert image.known_tag(spec(ctx, df), cache) == tag
    (ctx / "extern/cuzk/src/main.rs").write_text("fn main() { edited() }\n")
    assert image.known_tag(spec(ctx, df), cache) is None  # changed since: unknown, not stale


def test_a_link_to_dev_zero_is_hashed_as_a_link(tmp_path: Path) -> None:
    ctx, df = checkout(tmp_path), dockerfile(tmp_path)
    (ctx / "zero").symlink_to("/dev/zero")
    (ctx / "outside").symlink_to(tmp_path / "docker")
    assert image.content_tag(spec(ctx, df), tmp_path / "cache").startswith("rollout/cuzk:c-")


def test_a_dockerignore_that_is_a_link_or_huge_is_not_read_whole(tmp_path: Path) -> None:
    ctx = checkout(tmp_path, dockerignore=None)
    (ctx / ".dockerignore").symlink_to("/dev/zero")
    assert buildcontext.ignore_patterns(ctx) == list(buildcontext.ALWAYS_EXCLUDED)
    (ctx / ".dockerignore").unlink()
    (ctx / ".dockerignore").write_text("# comment\n\nnode_modules\n" + "x" * (2 * 1024**2))
    patterns = buildcontext.ignore_patterns(ctx)
    assert patterns[:2] == ["**/target", "node_modules"]
    assert sum(len(p) for p in patterns) <= buildcontext.IGNORE_FILE_LIMIT


def test_the_archive_sends_what_included_lists(tmp_path: Path, opened: list[str]) -> None:
    ctx, df = checkout(tmp_path), dockerfile(tmp_path)
    opened.clear()
    fileobj, name = buildcontext.archive(ctx, df)
    with tarfile.open(fileobj=fileobj) as tar:
        members = set(tar.getnames())
        assert tar.extractfile(name).read() == df.read_bytes()  # type: ignore[union-attr]
    fileobj.close()
    assert name.startswith(".dockerfile.")  # the Dockerfile lies outside the context
    assert "extern/cuzk/src/main.rs" in members
    assert not [m for m in members if "target" in m.split("/") or m.startswith("node_modules")]
    assert read_under(opened, "target", "node_modules") == []


def test_a_dockerfile_inside_the_context_keeps_its_name(tmp_path: Path) -> None:
    ctx = checkout(tmp_path)
    df = ctx / "Dockerfile.cuzk"
    df.write_text("FROM scratch\n")
    fileobj, name = buildcontext.archive(ctx, df)
    fileobj.close()
    assert name == "Dockerfile.cuzk"
