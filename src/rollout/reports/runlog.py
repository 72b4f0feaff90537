"""Fold a run's events (live from the bus, or read back from its journal) into one record per
host: its steps in order, with times, statuses and reasons, and how the host ended."""

from __future__ import annotations

import sys
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from rollout.errors import UserError
from rollout.output.events import Event
from rollout.output.resume import journal_events

CONTROLLER = "controller"


@dataclass
class StepRun:
    name: str
    kind: str
    start: float
    end: float | None = None
    status: str = "running"
    reason: str = ""
    attempts: int = 1
    output: str = ""
    data: dict[str, Any] = field(default_factory=dict)

    @property
    def duration(self) -> float:
        recorded = self.data.get("duration")
        if isinstance(recorded, (int, float)):
            return float(recorded)
        return max(0.0, (self.end or self.start) - self.start)

    @property
    def rollback(self) -> bool:
        return self.name.startswith("rollback-")


@dataclass
class HostRun:
    name: str
    steps: list[StepRun] = field(default_factory=list)
    status: str = "not_started"
    reason: str = ""
    release: str | None = None
    cause: str | None = None

    @property
    def start(self) -> float | None:
        return self.steps[0].start if self.steps else None

    @property
    def end(self) -> float | None:
        ends = [s.end for s in self.steps if s.end is not None]
        return max(ends) if ends else None

    @property
    def duration(self) -> float:
        start, end = self.start, self.end
        return end - start if start is not None and end is not None else 0.0

    @property
    def changed(self) -> list[StepRun]:
        return [s for s in self.steps if s.status == "changed"]


@dataclass
class RunRecord:
    run_id: str
    start: float = 0.0
    end: float | None = None
    status: str = "running"
    aborted: str | None = None
    hosts: dict[str, HostRun] = field(default_factory=dict)
    kind: str = "rollout"
    version: str = ""

    @property
    def duration(self) -> float:
        return (self.end or self.start) - self.start

    def host(self, name: str | None) -> HostRun:
        key = name or CONTROLLER
        return self.hosts.setdefault(key, HostRun(key))


def as_dict(event: Event | dict[str, Any]) -> dict[str, Any]:
    return asdict(event) if isinstance(event, Event) else event


def fold(events: Iterable[Event | dict[str, Any]]) -> RunRecord:
    """The record of one run from its events, in the order they were emitted."""
    record: RunRecord | None = None
    for event in map(as_dict, events):
        if record is None:
            record = RunRecord(str(event.get("run_id") or "?"), float(event.get("time") or 0))
        _apply(record, event)
    if record is None:
        raise UserError("no events: nothing to report")
    return record


def _apply(record: RunRecord, e: dict[str, Any]) -> None:
    kind, t, data = e.get("kind"), float(e.get("time") or 0), e.get("data") or {}
    if kind == "run_start":
        record.start = t
        record.version = str(data.get("version") or "")
        for batch in data.get("batches") or []:
            for name in batch if isinstance(batch, list) else []:
                record.host(str(name))
        if isinstance(data.get("request"), dict) and "rollback_to" in data["request"]:
            record.kind = "rollback"  # each host goes back to its own earlier release
            to = data["request"].get("rollback_to")
            record.version = str(to or "each host's previous release")
    elif kind == "step_start":
        step = StepRun(str(e.get("step")), str(data.get("kind") or e.get("step")), t)
        record.host(e.get("host")).steps.append(step)
    elif kind == "step_end":
        _end_step(record.host(e.get("host")), e, t, data)
    elif kind == "host_end":
        host = record.host(e.get("host"))
        host.status, host.reason = str(e.get("status") or ""), str(e.get("reason") or "")
        host.release, host.cause = data.get("release"), data.get("cause")
    elif kind == "run_end":
        record.end, record.status = t, str(e.get("status") or "")
        record.aborted = e.get("reason")
        for name, outcome in data.items():
            if isinstance(outcome, dict) and record.host(name).status == "not_started":
                record.host(name).reason = str(outcome.get("reason") or "")


def _end_step(host: HostRun, e: dict[str, Any], t: float, data: dict[str, Any]) -> None:
    name = str(e.get("step"))
    open_steps = [s for s in host.steps if s.name == name and s.end is None]
    step = open_steps[-1] if open_steps else None
    if step is None:
        step = StepRun(name, name, t)
        host.steps.append(step)
    step.end, step.status = t, str(e.get("status") or "")
    step.reason, step.data = str(e.get("reason") or ""), data
    step.attempts = int(data.get("attempts") or 0)
    step.output = str(data.get("output") or "")


def read_journal(path: Path) -> list[dict[str, Any]]:
    """The events of runs/RUN_ID.jsonl; a line cut short (a controller killed mid-write) is
    left out with a warning."""
    if not path.exists():
        raise UserError(f"no journal {path}")
    events, warnings = journal_events(path)  # each field's type checked: exit 2 at its line
    for warning in warnings:
        print(f"warning: {warning}", file=sys.stderr)
    return events
