"""The run as Markdown for a CI step summary: the verdict, each host's result, duration and
what changed, and each host's steps folded under it."""

from __future__ import annotations

from rollout.output.escape import html_text, report_text
from rollout.reports.runlog import CONTROLLER, HostRun, RunRecord, StepRun

ICON = {"validated": "✅", "rolled_back": "↩️", "not_started": "⏸️", "skipped": "⏭️"}


def cell(text: object) -> str:
    """A value inside a table cell: no markup, no HTML, no line break, no column break, no
    control character (output.escape)."""
    s = report_text(text if text is not None else "-")
    for a, b in (("&", "&amp;"), ("<", "&lt;"), (">", "&gt;"), ("|", "\\|"), ("`", "\\`"),
                 ("*", "\\*"), ("_", "\\_"), ("[", "\\["), ("]", "\\]")):
        s = s.replace(a, b)
    return " ".join(s.split()) or "-"


def secs(value: float) -> str:
    return f"{value / 60:.0f}m{value % 60:04.1f}s" if value >= 60 else f"{value:.1f}s"


def _changed(host: HostRun) -> str:
    return ", ".join(s.name for s in host.changed) or "nothing"


def _host_row(host: HostRun) -> str:
    icon = ICON.get(host.status, "❌")
    release = (host.release or "-")[:12]
    return (f"| {cell(host.name)} | {icon} {cell(host.status)} | {cell(release)} | "
            f"{secs(host.duration)} | {cell(_changed(host))} | {cell(host.reason)} |")


def _step_row(step: StepRun) -> str:
    name, status, reason = cell(step.name), cell(step.status), cell(step.reason)
    return f"| {name} | {status} | {secs(step.duration)} | {reason} |"


def _steps(host: HostRun) -> list[str]:
    if not host.steps:
        return []
    return [f"<details><summary>{cell(host.name)}: {len(host.steps)} steps</summary>", "",
            "| step | status | duration | reason |", "| --- | --- | --- | --- |",
            *map(_step_row, host.steps), "", "</details>", ""]


def _output(step: StepRun) -> list[str]:
    """A failed controller step's last lines of output (a build's), as preformatted text."""
    if step.status != "failed" or not step.output:
        return []
    return [f"<details open><summary>last lines of {cell(step.name)}</summary>", "",
            f"<pre>{html_text(step.output, quote=False)}</pre>", "", "</details>", ""]


def render(record: RunRecord) -> str:
    hosts = [h for h in record.hosts.values() if h.name != CONTROLLER]
    good = sum(1 for h in hosts if h.status == "validated")
    verdict = "✅ succeeded" if record.status == "ok" else "❌ failed"
    what = "to" if record.kind == "rollback" else "version"
    lines = [f"## {record.kind} {cell(record.run_id)}: {verdict}", "",
             f"{good} of {len(hosts)} hosts validated; {what} {cell(record.version or '-')}; "
             f"{secs(record.duration)}", ""]
    if record.aborted:
        lines += [f"**Aborted:** {cell(record.aborted)}", ""]
    controller = record.hosts.get(CONTROLLER)
    if controller and controller.steps:
        lines += ["| controller step | status | duration | reason |", "| --- | --- | --- | --- |",
                  *map(_step_row, controller.steps), ""]
        lines += [line for step in controller.steps for line in _output(step)]
    lines += ["| host | result | release | duration | changed | reason |",
              "| --- | --- | --- | --- | --- | --- |", *map(_host_row, hosts), ""]
    for host in hosts:
        lines += _steps(host)
    return "\n".join(lines) + "\n"
