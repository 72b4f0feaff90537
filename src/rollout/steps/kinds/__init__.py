"""The host step kinds: one module each, exporting `KIND` (rollout.steps.base.Kind).

The kinds are found by listing this package: a new kind is a new module, with no list to
edit. KINDS holds them in the standard order (a playbook without `steps` runs them so).
"""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from rollout.config import playbook as _playbook
from rollout.config.playbook_model import Playbook
from rollout.steps.base import Kind


def _found() -> dict[str, Kind]:
    kinds = []
    for module in pkgutil.iter_modules(__path__):
        kind = importlib.import_module(f"{__name__}.{module.name}").KIND
        if not isinstance(kind, Kind) or kind.name != module.name:
            raise TypeError(f"{__name__}.{module.name}.KIND is not the Kind {module.name!r}")
        kinds.append(kind)
    return {k.name: k for k in sorted(kinds, key=lambda k: k.place)}


KINDS: Mapping[str, Kind] = _found()
"""Each host step kind by name, in the standard order."""
HOST_KINDS = _playbook.HostKinds({name: kind.params for name, kind in KINDS.items()},
                                 {name: kind.rule for name, kind in KINDS.items()})
"""The kinds as the config layer checks a playbook against them (and documents them)."""
UNDONE = tuple(name for name, kind in KINDS.items() if kind.undo is not None)
"""A rollback's kinds, in order: those that declare how they run in a rollback."""


def load_playbook(path: Path | str = _playbook.DEFAULT_PLAYBOOK,
                  overrides: Mapping[str, Any] | None = None,
                  settings: Mapping[str, Any] | None = None, builds: bool = True) -> Playbook:
    """rollout.config.playbook.load_playbook, the host kinds checked against KINDS."""
    return _playbook.load_playbook(path, overrides, settings, builds, kinds=HOST_KINDS)
