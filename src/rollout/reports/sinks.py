"""The report files a run writes when it ends, as sinks of its event bus."""

from __future__ import annotations

from functools import partial
from pathlib import Path

from rollout.reports import summary
from rollout.reports.output import ReportSink, append, write_atomic

STEP_SUMMARY = "GITHUB_STEP_SUMMARY"  # GitHub Actions shows what a step appends to this file


def report_sinks(
    junit_path: str | None, summary_path: str | None, step_summary: str | None
) -> list[ReportSink]:
    sinks = []
    if junit_path:
        from rollout.reports import junit  # xml.etree: only for a run that writes JUnit

        sinks.append(ReportSink(junit.render, partial(write_atomic, Path(junit_path))))
    if summary_path:
        sinks.append(ReportSink(summary.render, partial(write_atomic, Path(summary_path))))
    if step_summary:
        sinks.append(ReportSink(summary.render, partial(append, Path(step_summary))))
    return sinks
