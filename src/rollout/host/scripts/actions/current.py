"""The current link and the config a release ran with."""

from __future__ import annotations

import os
from typing import Any

# ruff: noqa: E501
# isort: off
from rollout.host.scripts.common import safe_remove, safe_write  # inlined on hosts
from rollout.host.scripts.actions.base import _open_read, _read_at_most, _release_id_ok, _report, _state_dir  # inlined on hosts
from rollout.host.scripts.actions.spec import action  # inlined on hosts
# isort: on

# ---------------------------------------------------------------- current and its config


def current_release(root: str) -> str | None:
    try:
        found = os.path.basename(os.readlink(os.path.join(root, "current")).rstrip("/"))
    except OSError:
        return None
    return found if _release_id_ok(found) else None


@action("root:str release:str", "previous:str?", "refused kept missing pointed", in_agent=True)
def point_current(root: str, release: str) -> dict[str, Any]:
    """Atomically repoint <root>/current at releases/RELEASE: a new link renamed over it."""
    if not _release_id_ok(release):
        return _report("refused", f"not a release id: {release[:80]!r}")
    before = current_release(root)
    if before == release:
        return _report("kept", f"current already points at {release}", previous=before)
    where = os.path.join(root, "releases", release)
    if not os.path.isdir(where) or os.path.islink(where):
        return _report("missing", f"release {release} is not on the host", previous=before)
    tmp = os.path.join(root, "current.new")
    safe_remove(tmp)  # a link or file left there: the entry itself, never its target
    os.symlink(f"releases/{release}", tmp)
    os.replace(tmp, os.path.join(root, "current"))
    return _report("pointed", f"current: {before or 'none'} -> {release}", previous=before)


@action("config_path:str kept_config:str", "", "none kept restored")
def restore_config(config_path: str, kept_config: str) -> dict[str, Any]:
    """Put back the config a release ran with (kept_config) at config_path, if it differs."""
    if not config_path or not kept_config:
        return _report("none", "no config to restore")
    fd = _open_read(kept_config)
    if fd is None:
        return _report("none", f"no kept config at {kept_config}")
    with os.fdopen(fd, "rb") as f:
        want = f.read()
    have = _open_read(config_path)
    if have is not None:
        with os.fdopen(have, "rb") as f:
            if f.read() == want:
                return _report("kept", f"{config_path} already holds the kept config")
    safe_write(config_path, want)  # never through a link
    return _report("restored", f"restored {config_path} from {kept_config}")



@action("root:str", "current:str? previous:str?", "pointed none", in_agent=True)
def pointed(root: str) -> dict[str, Any]:
    """The release current points at and the one recorded as before it (each: a release
    id, or None)."""
    now = current_release(root)
    text = (_read_at_most(os.path.join(_state_dir(root), "previous_release"), 256) or b"")
    before = text.decode("utf-8", "replace").strip()
    previous = before if _release_id_ok(before) else None
    return _report("pointed" if now else "none", f"current: {now or 'none'}", current=now,
                   previous=previous)
