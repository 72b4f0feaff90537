"""Programs that run ON each host: single-file, standard-library-only Python 3 scripts.

The controller sends them over SSH (``python3 - ARGS < script``) or uploads them
(the supervisor goes to <root>/rollout/supervisor.py). Each is also importable for tests.
"""

from __future__ import annotations

from importlib import resources

SCRIPTS = ("supervisor", "drain", "facts", "stop")


def script_text(name: str) -> str:
    """Source of the host script ``name`` ("drain" or "drain.py"), ready to send."""
    base = name[:-3] if name.endswith(".py") else name
    if base not in SCRIPTS:
        raise ValueError(f"unknown host script {name!r} (known: {', '.join(SCRIPTS)})")
    return resources.files(__package__).joinpath(f"{base}.py").read_text(encoding="utf-8")
