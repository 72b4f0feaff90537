"""The source a bundle was built from: the build context's git commit, `+dirty` when what
the build read differs from that commit."""

from __future__ import annotations

import subprocess
from pathlib import Path

from rollout.bundle.context import sent

# Paths are data: no pathspec magic (`:(glob)*`), and no hook or fsmonitor the tree's own
# config names runs because rollout asked git a question.
GIT = ("git", "--literal-pathspecs", "-c", "core.fsmonitor=false", "-c", "core.hooksPath=/dev/null")


def _git(folder: Path, *args: str, strip: bool = True) -> str | None:
    """git's output in `folder`; None when git is missing or says no (not a checkout)."""
    try:
        p = subprocess.run([*GIT, "-C", str(folder), *args], capture_output=True, text=True,
                           errors="surrogateescape", timeout=30)  # a name may be any bytes
    except (OSError, subprocess.TimeoutExpired):
        return None
    if p.returncode != 0:
        return None
    return p.stdout.strip() if strip else p.stdout


def _status_paths(folder: Path) -> list[str] | None:
    """The paths under `folder` that git status lists (a rename's both), relative to
    `folder`; None when git says no."""
    prefix = _git(folder, "rev-parse", "--show-prefix")
    raw = _git(folder, "status", "--porcelain", "-z", "--untracked-files=all", "--", ".",
               strip=False)
    if prefix is None or raw is None:
        return None
    entries, paths = raw.split("\0"), []
    i = 0
    while i < len(entries):
        entry = entries[i]
        if len(entry) > 3:
            paths.append(entry[3:])
            if entry[0] in "RC" and i + 1 < len(entries):  # "R  new", then the old name
                i += 1
                paths.append(entries[i])
        i += 1
    return [p[len(prefix):] for p in paths if p.startswith(prefix)]


def context_changed(context: Path) -> bool:
    """Whether what the build sends from `context` differs from the commit: a change under
    a folder it leaves out (cargo's target/, what .dockerignore lists) does not count."""
    paths = _status_paths(context)
    if not paths:
        return False
    sends = sent(context)
    return any(sends(p) for p in paths)


def changed(folder: Path, *paths: str) -> bool:
    """Whether `paths` in `folder` (the whole folder by default) hold anything git has not
    committed: a modified, staged, deleted or new file (ignored files do not count)."""
    return bool(_git(folder, "status", "--porcelain", "--untracked-files=all", "--",
                     *(paths or (".",))))


def source_revision(context: Path, dockerfile: Path | None = None) -> str | None:
    """The commit the build context is at, `+dirty` when what the build sends from the
    context, or the Dockerfile (in whichever checkout holds it), has uncommitted changes;
    None outside a git checkout."""
    commit = _git(context, "rev-parse", "--verify", "HEAD")
    if not commit:
        return None
    dirty = context_changed(context) or (
        dockerfile is not None and dockerfile.parent.is_dir()
        and changed(dockerfile.parent, dockerfile.name))
    return commit + ("+dirty" if dirty else "")
