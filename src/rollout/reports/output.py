"""Writing reports: atomically (a reader never sees half a file), and as sinks of the event
bus that render the run once it has ended."""

from __future__ import annotations

import os
import re
import tempfile
from collections.abc import Callable
from pathlib import Path

from rollout.output.escape import report_text
from rollout.output.events import LIVE_ONLY, Event, open_private, refuse_link
from rollout.reports.runlog import RunRecord, fold

# Characters XML 1.0 forbids (ANSI escapes in a daemon's log would make the file invalid).
_NOT_XML = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ufffe\uffff]")


def printable(text: str) -> str:
    """Text for a report file: every control character but newline and tab shown as its
    escape (output.escape), and what XML cannot carry at all removed."""
    return _NOT_XML.sub("", report_text(text))


def write_atomic(path: Path, text: str, mode: int = 0o600) -> None:
    """Write to a temporary file in the same folder (O_EXCL; 0600 unless told: reports carry
    output tails), fsync it, then rename it over `path`; a link at `path` is refused, never
    replaced."""
    path.parent.mkdir(parents=True, exist_ok=True)
    refuse_link(path)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            os.fchmod(f.fileno(), mode)
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def append(path: Path, text: str) -> None:
    """Append (GitHub's $GITHUB_STEP_SUMMARY collects what each step appends)."""
    with open_private(path, append=True) as f:
        f.write(text)


Render = Callable[[RunRecord], str]


class ReportSink:
    """Keeps the run's events; at run_end renders them and writes the report."""

    def __init__(self, render: Render, write: Callable[[str], None]) -> None:
        self.render = render
        self.write = write
        self.events: list[Event] = []

    def __call__(self, event: Event) -> None:
        if event.kind not in LIVE_ONLY:
            self.events.append(event)
        if event.kind == "run_end":
            self.write(self.render(fold(self.events)))
