"""The report files a run writes when it ends, as sinks of its event bus."""

from __future__ import annotations

from functools import partial
from pathlib import Path

from rollout.output.events import refuse_link
from rollout.reports import summary
from rollout.reports.output import ReportSink, append, write_atomic

STEP_SUMMARY = "GITHUB_STEP_SUMMARY"  # GitHub Actions shows what a step appends to this file


def report_sinks(
    junit_path: str | None, summary_path: str | None, step_summary: str | None
) -> list[ReportSink]:
    sinks = []
    for path in (junit_path, summary_path, step_summary):
        if path:
            refuse_link(Path(path))  # before the run: never found out at its end
    if junit_path:
        from rollout.reports import junit  # xml.etree: only for a run that writes JUnit

        sinks.append(ReportSink(junit.render, partial(write_atomic, Path(junit_path))))
    if summary_path:
        sinks.append(ReportSink(summary.render, partial(write_atomic, Path(summary_path))))
    if step_summary:
        sinks.append(ReportSink(summary.render, partial(append, Path(step_summary))))
    return sinks
