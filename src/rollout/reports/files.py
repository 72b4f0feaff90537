"""`rollout report`: the reports of a finished run, rendered from its journal."""

from __future__ import annotations

from pathlib import Path

from rollout.output.events import refuse_link
from rollout.reports import html, junit, summary
from rollout.reports.output import write_atomic
from rollout.reports.runlog import fold, read_journal


def write_run_reports(
    journal: Path, html_path: str | None, junit_path: str | None, summary_path: str | None
) -> None:
    for path in (html_path, junit_path, summary_path):
        if path:
            refuse_link(Path(path))
    record = fold(read_journal(journal))
    for path, render in ((html_path, html.render), (junit_path, junit.render),
                         (summary_path, summary.render)):
        if path:
            write_atomic(Path(path), render(record))
