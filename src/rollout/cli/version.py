"""The line `rollout --version` prints, answered before the command line is parsed."""

from __future__ import annotations

from rollout import __version__

NAME = "rollout"
FLAGS = (["--version"], ["-V"])


def version_line() -> str:
    return f"{NAME} {__version__}"
