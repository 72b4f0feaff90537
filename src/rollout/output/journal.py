"""Reading a run's journal (runs/RUN_ID.jsonl) back, for --resume.

The journal is fsynced event by event, but a controller killed mid-write leaves its last
line cut short. Such a line is skipped with a warning: it is an event that never finished
being written, and the hosts' real state is read again anyway.
"""

from __future__ import annotations

import json
import re
import stat
from pathlib import Path
from typing import Any

from rollout.errors import UserError
from rollout.readfile import read_lines

from .resume import MAX_JOURNAL, MAX_LINE

RUN_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,127}")


def journal_path(runs: Path, run_id: str) -> Path:
    """runs/RUN_ID.jsonl; UserError for a run id that is not one (a `/`, `..`, a leading
    `-` or `.`, a control character: never a path built from it)."""
    if RUN_ID.fullmatch(run_id) is None or ".." in run_id:
        raise UserError(f"not a run id: {run_id[:80]!r} (letters, digits, '_', '.' and '-', "
                        "as rollout names its runs)")
    return runs / f"{run_id}.jsonl"


LATEST = "latest"  # `rollout report latest`: the run whose journal was written last


def latest_run(runs: Path) -> str:
    """The id of the run whose journal in `runs` was written last (a link or anything but a
    plain file named as a journal is passed over); UserError when there is none."""
    found: list[tuple[float, str]] = []
    for path in runs.glob("*.jsonl") if runs.is_dir() else ():
        run_id = path.name.removesuffix(".jsonl")
        info = path.lstat()
        if RUN_ID.fullmatch(run_id) and ".." not in run_id and stat.S_ISREG(info.st_mode):
            found.append((info.st_mtime, run_id))
    if not found:
        raise UserError(f"no run journal in {runs}/ to report on (runs/RUN_ID.jsonl is written "
                        "by each run; ROLLOUT_RUNS_DIR names another folder)")
    return max(found)[1]


def read_journal(path: Path) -> tuple[list[dict[str, Any]], list[str]]:
    """(the events, one warning per line that is not a whole event: where and why). Read as
    `resume` reads a journal: bounded, a line past MAX_LINE skipped, never quoted."""
    events: list[dict[str, Any]] = []
    warnings: list[str] = []
    lines = list(read_lines(path, "journal", max_line=MAX_LINE, limit=MAX_JOURNAL))
    for number, line in lines:
        event = _event(line)
        if event is not None:
            events.append(event)
        elif line is None or line.strip():
            where = "its last line" if number == len(lines) else f"line {number}"
            warnings.append(f"{path}:{number}: {where} is not a whole event (cut short when "
                            "the controller died?): skipped")
    return events, warnings


def _event(line: bytes | None) -> dict[str, Any] | None:
    try:
        event = json.loads(line.decode("utf-8", "replace")) if line is not None else None
    except (ValueError, RecursionError):
        return None
    return event if isinstance(event, dict) and isinstance(event.get("kind"), str) else None
