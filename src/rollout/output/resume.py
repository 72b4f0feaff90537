"""Reading a run's journal (runs/RUN_ID.jsonl) as hostile input: what a resumed run takes
from it (the request its run_start recorded, the hosts it validated) and the events `rollout
report` renders. The journal is a file anyone with the runs folder may
have edited: every field is checked for its type, and one that is wrong (or missing) is a
UserError naming the journal's file and line (exit 2), never a crash. Reading is bounded
(rollout.readfile.read_lines): a regular file of at most MAX_JOURNAL bytes, and a line
longer than MAX_LINE is skipped with a warning, as a cut line is, never held whole."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rollout.errors import Location, UserError
from rollout.readfile import read_lines

MAX_LINE = 16 << 20
"""Bytes of one journal line; a longer one is not an event rollout wrote. The longest
rollout writes is run_end, every host's outcome (about 430 bytes each: some 39,000 hosts)."""
MAX_JOURNAL = 256 << 20  # bytes of a journal, whose events are all held in memory
# The request's fields (commands.app.RolloutRequest.replayable) and the types they must have.
REQUEST: dict[str, tuple[type, ...]] = {
    "hosts": (str,),
    "playbook": (str, type(None)),
    "sets": (list,),
    "limit": (str, type(None)),
    "release": (str, type(None)),
    "adopt": (bool,),
}
OPTIONAL = {"release", "adopt"}  # journals of older versions lack them


@dataclass(frozen=True)
class Resumed:
    request: dict[str, Any]  # REQUEST's keys, each of its type ("sets": a list of str)
    validated: frozenset[str]  # hosts whose host_end said validated
    warnings: tuple[str, ...]


# The fields every reader of a journal takes as given, and the types they must have.
EVENT: dict[str, tuple[type, ...]] = {
    "kind": (str,),
    "time": (int, float, type(None)),
    "run_id": (str, type(None)),
    "host": (str, type(None)),
    "step": (str, type(None)),
    "status": (str, type(None)),
    "reason": (str, type(None)),
    "data": (dict, type(None)),
}
STEP_DATA: dict[str, tuple[type, ...]] = {  # step_end's data, as reports read it
    "attempts": (int, type(None)),
    "duration": (int, float, type(None)),
    "output": (str, type(None)),
}


def journal_events(path: Path) -> tuple[list[dict[str, Any]], list[str]]:
    """Every event of a journal, each field of the type its readers take as given
    (UserError naming the file, line and key otherwise: exit 2); the warnings for the lines
    skipped (cut, garbage, too deep, too long)."""
    warnings: list[str] = []
    events = _events(path, warnings)
    for line, event in events:
        _check(path, line, event, EVENT, "")
        if event["kind"] == "step_end" and isinstance(event.get("data"), dict):
            _check(path, line, event["data"], STEP_DATA, "data.")
    return [e for _, e in events], warnings


def _check(path: Path, line: int, doc: dict[str, Any], types: dict[str, tuple[type, ...]],
           prefix: str) -> None:
    for key, allowed in types.items():
        value = doc.get(key)
        if not _typed(key, value, allowed):
            raise UserError(f"a {type(value).__name__}, not "
                            + " or ".join("null" if t is type(None) else t.__name__
                                          for t in allowed),
                            Location(str(path), line, prefix + key))


def _events(path: Path, warnings: list[str]) -> list[tuple[int, dict[str, Any]]]:
    out: list[tuple[int, dict[str, Any]]] = []
    for number, raw in read_lines(path, "journal", max_line=MAX_LINE, limit=MAX_JOURNAL):
        if raw is None:
            warnings.append(f"{path}:{number}: a line of more than {MAX_LINE} bytes: skipped")
            continue
        try:
            event = json.loads(raw.decode("utf-8", "replace"))
        except (ValueError, RecursionError):
            event = None
        if isinstance(event, dict) and isinstance(event.get("kind"), str):
            out.append((number, event))
        elif raw.strip():
            warnings.append(f"{path}:{number}: not a whole event (cut short when the "
                            f"controller died?): skipped")
    return out


def _request(path: Path, line: int, start: dict[str, Any]) -> dict[str, Any]:
    data = start.get("data")
    request = data.get("request") if isinstance(data, dict) else None
    if not isinstance(request, dict) or not request:
        raise UserError("run_start has no request: cannot resume this run",
                        Location(str(path), line, "data.request"))
    out: dict[str, Any] = {}
    for key, types in REQUEST.items():
        if key not in request and key in OPTIONAL:
            out[key] = None if key == "release" else False
            continue
        value: Any = request.get(key)
        if key not in request or not _typed(key, value, types):
            what = "missing" if key not in request else f"a {type(value).__name__}"
            want = "a list of strings" if key == "sets" else " or ".join(
                "null" if t is type(None) else t.__name__ for t in types)
            raise UserError(f"{what}, not {want}: cannot resume this run",
                            Location(str(path), line, f"data.request.{key}"))
        out[key] = value
    return out


def _typed(key: str, value: Any, types: tuple[type, ...]) -> bool:
    if isinstance(value, bool) and bool not in types:
        return False
    if isinstance(value, float) and not math.isfinite(value):
        return False
    if key == "sets":
        return isinstance(value, list) and all(isinstance(s, str) for s in value)
    return isinstance(value, types)


def read_resumed(path: Path) -> Resumed:
    """The request and the validated hosts of the run journaled at `path`."""
    warnings: list[str] = []
    events = _events(path, warnings)
    start = next(((n, e) for n, e in events if e["kind"] == "run_start"), None)
    if start is None:
        raise UserError(f"{path} has no run_start event: cannot resume this run")
    validated = frozenset(e["host"] for _, e in events if e["kind"] == "host_end"
                          and e.get("status") == "validated" and isinstance(e.get("host"), str))
    return Resumed(_request(path, *start), validated, tuple(warnings))
