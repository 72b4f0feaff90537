"""The manifest's source_revision: the build context's commit, `+dirty` when the tree the
build read has uncommitted changes (a real git repository in a temp folder)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from rollout.bundle.revision import source_revision


def _git(repo: Path, *args: str) -> None:
    subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True)


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    root = tmp_path / "src"
    (root / "ctx").mkdir(parents=True)
    (root / "docker").mkdir()
    (root / "ctx" / "main.rs").write_text("fn main() {}\n")
    (root / "ctx" / ".gitignore").write_text("target/\n")
    (root / "docker" / "cuzk.Dockerfile").write_text("FROM scratch\n")
    _git(root, "init", "-q")
    _git(root, "add", ".")
    _git(root, "-c", "user.email=t@t", "-c", "user.name=t", "commit", "-qm", "first")
    return root


def _head(repo: Path) -> str:
    return subprocess.run(["git", "-C", str(repo), "rev-parse", "HEAD"], check=True,
                          capture_output=True, text=True).stdout.strip()


def _revision(repo: Path) -> str | None:
    return source_revision(repo / "ctx", repo / "docker" / "cuzk.Dockerfile")


def test_a_clean_tree_records_its_commit(repo: Path) -> None:
    (repo / "ctx" / "target").mkdir()
    (repo / "ctx" / "target" / "out.o").write_text("ignored build output")
    (repo / "elsewhere.txt").write_text("outside what the build reads")
    assert _revision(repo) == _head(repo)


@pytest.mark.parametrize("change", ["modified", "staged", "deleted", "untracked", "dockerfile"])
def test_uncommitted_changes_record_dirty(repo: Path, change: str) -> None:
    source = repo / "ctx" / "main.rs"
    if change == "modified":
        source.write_text("fn main() { panic!() }\n")
    elif change == "staged":
        source.write_text("fn main() { panic!() }\n")
        _git(repo, "add", "ctx/main.rs")
    elif change == "deleted":
        source.unlink()
    elif change == "untracked":
        (repo / "ctx" / "patch.rs").write_text("// new, never committed\n")
    else:  # the Dockerfile lies outside the context, in the same checkout
        (repo / "docker" / "cuzk.Dockerfile").write_text("FROM scratch\nRUN true\n")
    assert _revision(repo) == _head(repo) + "+dirty"


def test_paths_are_literal_not_pathspec_magic(repo: Path) -> None:
    hostile = repo / "docker" / ":(glob)*"
    hostile.write_text("FROM scratch\n")
    _git(repo, "add", "--", str(hostile))
    _git(repo, "-c", "user.email=t@t", "-c", "user.name=t", "commit", "-qm", "hostile name")
    (repo / "docker" / "cuzk.Dockerfile").write_text("changed, but not the Dockerfile\n")
    # Only the file named ':(glob)*' counts for the Dockerfile, never every file it matches.
    assert source_revision(repo / "ctx", hostile) == _head(repo)
    hostile.write_text("FROM scratch\nRUN true\n")
    assert source_revision(repo / "ctx", hostile) == _head(repo) + "+dirty"


def test_outside_a_checkout_there_is_no_revision(tmp_path: Path) -> None:
    (tmp_path / "ctx").mkdir()
    assert source_revision(tmp_path / "ctx", tmp_path / "Dockerfile") is None


def test_what_the_build_leaves_out_never_makes_it_dirty(repo: Path) -> None:
    """An untracked cargo target/ (no .gitignore for it) and a folder .dockerignore lists
    are not what the build sends: the tree it reads is still the commit's."""
    (repo / "ctx" / ".gitignore").unlink()
    (repo / "ctx" / ".dockerignore").write_text("scratch\n")
    _git(repo, "add", "-A")
    _git(repo, "-c", "user.email=t@t", "-c", "user.name=t", "commit", "-qm", "no gitignore")
    (repo / "ctx" / "extern" / "cuzk" / "target").mkdir(parents=True)
    (repo / "ctx" / "extern" / "cuzk" / "target" / "cuzk-daemon").write_text("built")
    (repo / "ctx" / "scratch").mkdir()
    (repo / "ctx" / "scratch" / "notes \udcff.txt".encode("utf-8", "surrogateescape").decode(
        "utf-8", "surrogateescape")).write_text("a name that is not UTF-8")
    assert _revision(repo) == _head(repo)
    (repo / "ctx" / "extern" / "new.rs").write_text("// sent, never committed\n")
    assert _revision(repo) == _head(repo) + "+dirty"


def test_a_rename_counts_both_names(repo: Path) -> None:
    (repo / "ctx" / ".dockerignore").write_text("old\n")
    (repo / "ctx" / "old").mkdir()
    (repo / "ctx" / "old" / "a.rs").write_text("// a\n")
    _git(repo, "add", "-A")
    _git(repo, "-c", "user.email=t@t", "-c", "user.name=t", "commit", "-qm", "old")
    _git(repo, "mv", "ctx/old/a.rs", "ctx/a.rs")  # from a left-out folder into what is sent
    assert _revision(repo) == _head(repo) + "+dirty"
