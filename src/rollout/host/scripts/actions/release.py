"""A release's folders: pruned, staged ahead, installed, read back."""

from __future__ import annotations

import contextlib
import json
import os
from typing import Any

# ruff: noqa: E501
# isort: off
from rollout.host.scripts.common import safe_write  # inlined on hosts
from rollout.host.scripts.actions.base import _read_at_most, _release_id_ok, _report, _state_dir  # inlined on hosts
from rollout.host.scripts.actions.spec import action  # inlined on hosts
from rollout.host.scripts.actions.current import current_release  # inlined on hosts
from rollout.host.scripts.actions.folders import _evict, _identity, _names, _remove_tree, file_sums, make_folder  # inlined on hosts
# isort: on

@action("root:str releases:[str] keep:[str]?", "removed:[str] kept:[str]", "failed none pruned")
def prune(root: str, releases: list[str], keep: list[str] | None = None) -> dict[str, Any]:
    """Remove the named release folders; never what current points at, one in `keep`, a
    name that is not a release id, or a link (a link is removed, never followed). A folder
    that could not be removed: "failed", named with why."""
    protected = set(keep or []) | {current_release(root) or ""}
    removed, kept, failed = [], [], []
    for release in releases:
        where = os.path.join(root, "releases", release)
        if not _release_id_ok(release) or release in protected:
            kept.append(release)
            continue
        if not os.path.lexists(where):
            continue
        try:
            _remove_tree(where)
        except OSError as e:
            failed.append(f"{release}: {e.strerror or e}")
            continue
        removed.append(release)
    if failed:
        return _report("failed", f"could not remove {'; '.join(failed)[:300]}",
                       removed=removed, kept=kept)
    if not removed:
        return _report("none", "no release to remove", kept=kept)
    return _report("pruned", f"removed {len(removed)} release(s)", removed=removed, kept=kept)


@action("root:str name:str", "", "refused none removed")
def remove_partial(root: str, name: str) -> dict[str, Any]:
    """Remove an upload's unfinished folder <root>/releases/.partial-*: only such a name."""
    if not name.startswith(".partial-") or "/" in name or name in (".partial-",):
        return _report("refused", f"not an upload's partial folder: {name[:80]!r}")
    where = os.path.join(root, "releases", name)
    if not os.path.lexists(where):
        return _report("none", f"no {name} to remove")
    _remove_tree(where)
    return _report("removed", f"removed {name}")



@action("root:str release:str", "manifest:str sums:{str?}", "refused missing read")
def read_release(root: str, release: str) -> dict[str, Any]:
    """releases/RELEASE/RELEASE.json (its text, at most 1 MiB, never through a link) and the
    sha256 of each executable it lists (file_sums), in one call; "missing": no manifest."""
    if not _release_id_ok(release):
        return _report("refused", f"not a release id: {release[:80]!r}")
    where = os.path.join(root, "releases", release)
    data = _read_at_most(os.path.join(where, "RELEASE.json"), 1 << 20)
    if data is None:
        return _report("missing", f"release {release} is not on the host")
    try:
        listed = json.loads(data).get("artifacts")
    except (ValueError, AttributeError):
        listed = None
    names = list(listed) if isinstance(listed, dict) else []
    return _report("read", f"release {release}'s manifest read",
                   manifest=data.decode("utf-8", "replace"), sums=file_sums(where, names)["sums"])


def _staging_root(root: str) -> str:
    return os.path.join(_state_dir(root), "staging")


def _tidy(where: str) -> None:
    """Remove the folder `where` if it is empty (never a link)."""
    if os.path.isdir(where) and not os.path.islink(where):
        with contextlib.suppress(OSError):
            os.rmdir(where)


@action(
    "root:str release:str partial:str manifest:str names:[str] expect:{str?}?",
    "identities:{str?}",
    "refused missing changed failed installed"
)
def install_release(root: str, release: str, partial: str, manifest: str, names: list[str],
                    expect: dict[str, str] | None = None) -> dict[str, Any]:
    """Install the folder `partial` as releases/RELEASE: where the identities `expect` (the
    files as staged) no longer hold, "changed" and `partial` is removed; else RELEASE.json
    (`manifest`) is written there, the files written back and evicted from the page cache,
    an old releases/RELEASE removed (a link there: the link itself) and `partial` renamed in
    its place ("installed", with the new identities). A staging folder left empty goes."""
    if not _release_id_ok(release):
        return _report("refused", f"not a release id: {release[:80]!r}")
    if os.path.islink(partial) or not os.path.isdir(partial):
        return _report("missing", f"no folder {partial} to install")
    files, dest = _names(names), os.path.join(root, "releases", release)
    try:
        if expect is not None and any(
                _identity(os.path.join(partial, n)) != expect.get(n) for n in files):
            _remove_tree(partial)
            _tidy(_staging_root(root))
            return _report("changed", f"{partial} changed since it was staged: removed")
        safe_write(os.path.join(partial, "RELEASE.json"), manifest.encode(), 0o644)
        for name in files:
            _evict(os.path.join(partial, name))
        if os.path.lexists(dest):
            _remove_tree(dest)
        os.rename(partial, dest)
    except OSError as e:
        return _report("failed", f"release {release} not installed: {e}")
    _tidy(_staging_root(root))
    return _report("installed", f"installed release {release}",
                   identities={n: _identity(os.path.join(dest, n)) for n in files})


def _staging_links(root: str) -> list[str]:
    """rollout/ and its staging folder, where either is a link (nothing is removed there)."""
    return [p for p in (_state_dir(root), _staging_root(root)) if os.path.islink(p)]


def _clear_staging(root: str, release: str) -> list[str]:
    """Remove the staging of other releases (named, at most 20) and RELEASE's own."""
    stale: list[str] = []
    where = _staging_root(root)
    if os.path.isdir(where):
        for name in sorted(os.listdir(where)):
            if name != release:
                _remove_tree(os.path.join(where, name))
                stale.append(name[:80])
    if os.path.lexists(os.path.join(where, release)):
        _remove_tree(os.path.join(where, release))
    return stale[:20]


@action(
    "root:str release:str names:[str]",
    "links:[str] stale:[str] present:bool same_device:bool",
    "refused surveyed",
    in_agent=True,
)
def staging_survey(root: str, release: str, names: list[str]) -> dict[str, Any]:
    """Before staging RELEASE ahead: the folders that are links (rollout/, its staging
    folder, releases/: then nothing is removed), stale staging cleared (_clear_staging),
    whether the release is on the host already (its RELEASE.json and each of `names`), and
    whether releases/ and rollout/ share a device (a rename must not become a copy)."""
    if not _release_id_ok(release):
        return _report("refused", f"not a release id: {release[:80]!r}")
    releases = os.path.join(root, "releases")
    links = [p for p in (_state_dir(root), _staging_root(root), releases)
             if os.path.islink(p)]
    stale: list[str] = []
    if not _staging_links(root):
        with contextlib.suppress(OSError):
            stale = _clear_staging(root, release)
    dest = os.path.join(releases, release)
    present = os.path.isfile(os.path.join(dest, "RELEASE.json")) and all(
        os.path.lexists(os.path.join(dest, n)) for n in _names(names))
    try:
        same = os.lstat(releases).st_dev == os.lstat(_state_dir(root)).st_dev
    except OSError:
        same = False
    return _report("surveyed", f"{len(stale)} stale staging folder(s) removed", links=links,
                   stale=stale, present=present, same_device=same)


@action("root:str release:str", "", "refused none removed")
def unstage(root: str, release: str) -> dict[str, Any]:
    """Remove the staging of RELEASE, and the staging folder if it is then empty; nothing
    where rollout/ or its staging folder is a link ("refused")."""
    if not _release_id_ok(release):
        return _report("refused", f"not a release id: {release[:80]!r}")
    links = _staging_links(root)
    if links:
        return _report("refused", f"{links[0]} is a symbolic link: nothing removed")
    where = os.path.join(_staging_root(root), release)
    if not os.path.lexists(where):
        _tidy(_staging_root(root))
        return _report("none", f"nothing staged for {release}")
    _remove_tree(where)
    _tidy(_staging_root(root))
    return _report("removed", f"removed the staging of {release}")


@action("root:str name:str", "", "refused kept made")
def pull_folder(root: str, name: str) -> dict[str, Any]:
    """Make releases/NAME (a pull's partial folder, `.partial-*-pull`) for a download into
    it, kept as it is to resume; every other pull's partial folder there is abandoned
    (removed: the host lock makes this the only pull)."""
    if not (name.startswith(".partial-") and name.endswith("-pull")) or "/" in name:
        return _report("refused", f"not a pull's partial folder: {name[:80]!r}")
    releases = os.path.join(root, "releases")
    if os.path.isdir(releases) and not os.path.islink(releases):
        for other in os.listdir(releases):
            if other != name and other.startswith(".partial-") and other.endswith("-pull"):
                with contextlib.suppress(OSError):
                    _remove_tree(os.path.join(releases, other))
    return make_folder(os.path.join(releases, name))
