"""Results and events as plain data, and the sinks that render them.

The console view, the JSON lines and the run journal are all renderings of one stream.
"""

from __future__ import annotations

import json
import os
import stat
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field, fields, is_dataclass
from enum import StrEnum
from pathlib import Path
from typing import IO, Any

from rollout.errors import UserError
from rollout.readfile import open_regular
from rollout.secrets import redact


class Status(StrEnum):
    OK = "ok"
    CHANGED = "changed"
    SKIPPED = "skipped"
    FAILED = "failed"


@dataclass
class StepResult:
    """What one step did on one host (or on the controller)."""

    status: Status
    reason: str
    data: dict[str, Any] = field(default_factory=dict)
    output: str = ""
    attempts: int = 1
    duration: float = 0.0

    @property
    def failed(self) -> bool:
        return self.status is Status.FAILED


def changed(reason: str, **data: Any) -> StepResult:
    return StepResult(Status.CHANGED, reason, data)


def ok(reason: str, **data: Any) -> StepResult:
    return StepResult(Status.OK, reason, data)


def skipped(reason: str, **data: Any) -> StepResult:
    return StepResult(Status.SKIPPED, reason, data)


def failed(reason: str, output: str = "", **data: Any) -> StepResult:
    return StepResult(Status.FAILED, reason, data, output=output)


@dataclass
class Event:
    kind: str  # run_start, batch_start, step_start, step_end, host_end, run_end, note
    run_id: str
    host: str | None = None
    step: str | None = None
    status: str | None = None
    reason: str | None = None
    data: dict[str, Any] = field(default_factory=dict)
    time: float = field(default_factory=time.time)

    def to_json(self) -> str:
        return json.dumps(self, default=_plain, sort_keys=True)


def _plain(value: Any) -> Any:
    """What json.dumps writes for a value it has no form for: a dataclass (the event, a
    report in its data) as its fields, which json.dumps then writes the same way, anything
    else as its text. No deep copy first: dataclasses.asdict's made writing an event four
    times as costly."""
    if is_dataclass(value) and not isinstance(value, type):
        return {f.name: getattr(value, f.name) for f in fields(value)}
    return str(value)


Sink = Callable[[Event], None]

LIVE_ONLY = frozenset({"build_output"})
"""Events for a live reader alone (the console under -v, a --json stream): every line a
build prints. The bus keeps none in its history, the journal and the reports none: they
keep the step's last lines instead."""


def open_private(path: Path, append: bool = False) -> IO[str]:
    """Open a file for writing that only its owner may read (0600: reports name hosts,
    commands and outputs, which may hold secrets the redaction does not know)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    refuse_link(path)
    flags = os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW | (os.O_APPEND if append else os.O_TRUNC)
    try:  # O_NONBLOCK: a FIFO with no reader is refused (ENXIO), never waited on
        fd = os.open(path, flags | os.O_NONBLOCK, 0o600)
    except OSError as e:
        refuse_link(path)  # planted since the look above
        raise UserError(f"cannot write {path}: {e.strerror}") from e
    os.set_blocking(fd, True)
    os.fchmod(fd, 0o600)
    return os.fdopen(fd, "a" if append else "w", encoding="utf-8")


def refuse_link(path: Path) -> None:
    """UserError when `path` is a symbolic link: a report or journal is never written
    through one (its target, wherever it leads, would be truncated or overwritten)."""
    if path.is_symlink():
        raise UserError(f"{path} is a symbolic link: rollout writes reports and journals "
                        "only to plain files, never through a link (remove it or name another "
                        "file)")


class EventBus:
    """Fans every event out to the sinks, one event at a time, from any thread."""

    def __init__(self, run_id: str) -> None:
        self.run_id = run_id
        self._sinks: list[Sink] = []
        self._lock = threading.Lock()
        self.history: list[Event] = []

    def subscribe(self, sink: Sink) -> None:
        self._sinks.append(sink)

    def emit(self, kind: str, **fields: Any) -> Event:
        event = Event(kind=kind, run_id=self.run_id, **redact(fields))
        with self._lock:
            if kind not in LIVE_ONLY:
                self.history.append(event)
            for sink in self._sinks:
                sink(event)
        return event


def _ends_mid_line(path: Path, stream: IO[str]) -> bool:
    """Whether the journal at `path`, just opened as `stream`, ends with a line cut short."""
    if not stat.S_ISREG(os.fstat(stream.fileno()).st_mode):
        return False
    with open_regular(path, "journal") as f:
        if f.seek(0, os.SEEK_END) == 0:
            return False
        f.seek(-1, os.SEEK_END)
        return f.read(1) != b"\n"


MILESTONES = frozenset({"run_start", "locks_taken", "lock_broken", "lock_lost", "batch_start",
                        "host_end", "guard_report", "run_end"})
"""The events a resumed run and a reader of the journal after a crash rely on. Every line is
written and flushed at once, so it outlives the controller's process; a durable journal
also fsyncs at these, so that they outlive the machine. An fsync per event (about 1 ms each,
one at a time under the bus's lock) cost an 8-host rollout 0.2 s."""


class JsonLinesSink:
    """Writes events as JSON lines; `durable` fsyncs at each milestone (the run journal)."""

    def __init__(self, stream: IO[str], durable: bool = False) -> None:
        self.stream = stream
        self.durable = durable

    @classmethod
    def to_path(cls, path: Path, durable: bool = False) -> JsonLinesSink:
        stream = open_private(path, append=True)
        if _ends_mid_line(path, stream):  # a journal resumed after a crash: end the line cut short
            stream.write("\n")
        return cls(stream, durable)

    def __call__(self, event: Event) -> None:
        if self.durable and event.kind in LIVE_ONLY:
            return
        self.stream.write(event.to_json() + "\n")
        self.stream.flush()
        if self.durable and event.kind in MILESTONES:
            os.fsync(self.stream.fileno())
