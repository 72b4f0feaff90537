"""The source a bundle was built from: the build context's git commit, `+dirty` when what
the build read differs from that commit."""

from __future__ import annotations

import subprocess
from pathlib import Path

# Paths are data: no pathspec magic (`:(glob)*`), and no hook or fsmonitor the tree's own
# config names runs because rollout asked git a question.
GIT = ("git", "--literal-pathspecs", "-c", "core.fsmonitor=false", "-c", "core.hooksPath=/dev/null")


def _git(folder: Path, *args: str) -> str | None:
    """git's output in `folder`; None when git is missing or says no (not a checkout)."""
    try:
        p = subprocess.run([*GIT, "-C", str(folder), *args], capture_output=True, text=True,
                           timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return p.stdout.strip() if p.returncode == 0 else None


def changed(folder: Path, *paths: str) -> bool:
    """Whether `paths` in `folder` (the whole folder by default) hold anything git has not
    committed: a modified, staged, deleted or new file (ignored files do not count)."""
    return bool(_git(folder, "status", "--porcelain", "--untracked-files=all", "--",
                     *(paths or (".",))))


def source_revision(context: Path, dockerfile: Path | None = None) -> str | None:
    """The commit the build context is at, `+dirty` when the context or the Dockerfile (in
    whichever checkout holds it) has uncommitted changes; None outside a git checkout."""
    commit = _git(context, "rev-parse", "--verify", "HEAD")
    if not commit:
        return None
    dirty = changed(context) or (
        dockerfile is not None and dockerfile.parent.is_dir()
        and changed(dockerfile.parent, dockerfile.name))
    return commit + ("+dirty" if dirty else "")
