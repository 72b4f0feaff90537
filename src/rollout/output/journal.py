"""Reading a run's journal (runs/RUN_ID.jsonl) back, for --resume.

The journal is fsynced event by event, but a controller killed mid-write leaves its last
line cut short. Such a line is skipped with a warning: it is an event that never finished
being written, and the hosts' real state is read again anyway.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from rollout.errors import UserError

RUN_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,127}")


def journal_path(runs: Path, run_id: str) -> Path:
    """runs/RUN_ID.jsonl; UserError for a run id that is not one (a `/`, `..`, a leading
    `-` or `.`, a control character: never a path built from it)."""
    if RUN_ID.fullmatch(run_id) is None or ".." in run_id:
        raise UserError(f"not a run id: {run_id[:80]!r} (letters, digits, '_', '.' and '-', "
                        "as rollout names its runs)")
    return runs / f"{run_id}.jsonl"


def read_journal(path: Path) -> tuple[list[dict[str, Any]], list[str]]:
    """(the events, one warning per line that is not a whole event: where and why)."""
    events: list[dict[str, Any]] = []
    warnings: list[str] = []
    lines = path.read_text(encoding="utf-8", errors="replace").splitlines()
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            event = json.loads(line)
        except ValueError:
            event = None
        if isinstance(event, dict) and isinstance(event.get("kind"), str):
            events.append(event)
            continue
        where = "its last line" if number == len(lines) else f"line {number}"
        warnings.append(
            f"{path}:{number}: {where} is not a whole event (cut short when the controller "
            f"died?): skipped: {line[:80]!r}"
        )
    return events, warnings
