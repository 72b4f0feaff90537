"""The run as a JUnit XML file for CI: one testsuite per run, one testcase per host whose
steps are in its system-out; a host that did not end validated is a failure carrying the
reason and the failed step's output tail."""

from __future__ import annotations

import time
import xml.etree.ElementTree as ET

from rollout.reports.output import printable
from rollout.reports.runlog import CONTROLLER, HostRun, RunRecord, StepRun

SUCCESS = {"validated"}
NOT_RUN = {"not_started"}
OUTPUT_TAIL = 3000


def step_line(step: StepRun) -> str:
    return f"{step.name:<18} {step.status:<8} {step.duration:7.1f}s  {step.reason}"


def _failed_step(host: HostRun) -> StepRun | None:
    failed = [s for s in host.steps if s.status == "failed"]
    return failed[0] if failed else None


def _failure_text(host: HostRun) -> str:
    lines = [host.reason]
    for step in (s for s in host.steps if s.status == "failed"):
        lines.append(f"\n{step.name} failed: {step.reason}")
        if step.output:
            lines.append(f"--- output tail of {step.name} ---\n{step.output[-OUTPUT_TAIL:]}")
    return "\n".join(lines)


def _controller_text(message: str, host: HostRun) -> str:
    """A failed controller step (a build): the reason, then its last lines of output."""
    failed = _failed_step(host)
    if failed is None or not failed.output:
        return message
    return f"{message}\n--- last lines of {failed.name} ---\n{failed.output[-OUTPUT_TAIL:]}"


def _controller_status(host: HostRun) -> str:
    return "failed" if _failed_step(host) else "validated"


def testcase(record: RunRecord, host: HostRun) -> ET.Element:
    status = _controller_status(host) if host.name == CONTROLLER else host.status
    case = ET.Element(
        "testcase",
        name=printable(host.name),
        classname=f"rollout.{record.kind}",
        time=f"{host.duration:.3f}",
    )
    if status in NOT_RUN:
        ET.SubElement(case, "skipped", message=printable(host.reason or "not started"))
    elif status not in SUCCESS:
        failed = _failed_step(host)
        message = host.reason or (f"{failed.name} failed: {failed.reason}" if failed else status)
        failure = ET.SubElement(case, "failure", message=printable(message), type=status)
        failure.text = printable(_failure_text(host) if host.name != CONTROLLER
                                 else _controller_text(message, host))
    out = ET.SubElement(case, "system-out")
    out.text = printable("\n".join(step_line(s) for s in host.steps) + f"\nresult: {status}")
    return case


def render(record: RunRecord) -> str:
    hosts = [h for h in record.hosts.values() if h.name != CONTROLLER or h.steps]
    cases = [testcase(record, h) for h in hosts]
    failures = sum(1 for c in cases if c.find("failure") is not None)
    skipped = sum(1 for c in cases if c.find("skipped") is not None)
    suite = ET.Element(
        "testsuite",
        name=printable(f"{record.kind} {record.run_id}"),
        tests=str(len(cases)),
        failures=str(failures),
        errors="0",
        skipped=str(skipped),
        time=f"{record.duration:.3f}",
        timestamp=time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.start)),
    )
    props = ET.SubElement(suite, "properties")
    for name, value in (("run_id", record.run_id), ("version", record.version),
                        ("aborted", record.aborted or "")):
        ET.SubElement(props, "property", name=name, value=printable(value))
    suite.extend(cases)
    root = ET.Element("testsuites", name="rollout", tests=str(len(cases)),
                      failures=str(failures), errors="0", time=f"{record.duration:.3f}")
    root.append(suite)
    ET.indent(root)
    return '<?xml version="1.0" encoding="utf-8"?>\n' + ET.tostring(root, encoding="unicode") + "\n"
