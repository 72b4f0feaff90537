"""A docker build's output as it comes (the classic builder's stream of `{"stream": ...}`,
`{"error": ...}`, `{"aux": ...}` chunks): which step runs, its last line, and what failed.

Docker's output is hostile (a build can print anything): each line is masked, its control
characters escaped and cut, and only the last lines are kept. Progress is a `build_progress`
event at most every `interval` seconds while output comes, and at least every `heartbeat`
seconds while a step prints nothing (a silent `RUN` of ten minutes is not a silent console).
Every line is also a `build_output` event, which the console prints under -v and the
journal does not keep.
"""

from __future__ import annotations

import re
import threading
import time
from collections import deque
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from rollout.errors import StepFailed
from rollout.output.escape import control_escaped
from rollout.output.progress import EVENT_INTERVAL, Clock, Emit
from rollout.secrets import redact

HEARTBEAT = 5.0  # seconds: a progress event at least this often while the build runs
LINE_CUT = 1000  # characters of one output line kept (escaped), for -v
SHOWN_CUT = 200  # characters of a line in a progress event and in the failure's lines
INSTRUCTION_CUT = 80  # characters of the step's instruction shown
FAIL_LINES = 10  # lines of the failing step's output shown
KEEP_LINES = 20  # lines of the build's output kept in a built step's result
MAX_PENDING = 4096  # characters of a line without its end before it counts as a line

_STEP = re.compile(r"Step (\d{1,6})/(\d{1,6}) : (.*)")
_BUILDER = re.compile(r" ---> |Removing intermediate container |Successfully (built|tagged) ")
_BUILT = re.compile(r"Successfully built ([0-9a-f]{12,64})\s*$")
_EXIT = re.compile(r"returned a non-zero code: (\d{1,6})")
_BREAKS = re.compile(r"\r\n|\r|\n")
_STDERR_COLOUR = re.compile(r"\x1b\[(91|0)m")  # the classic builder wraps a RUN's stderr in red


def shown(raw: str, cut: int) -> str:
    """One line of docker's output as rollout shows it: masked, escaped, cut."""
    text = control_escaped(redact(raw))
    return text if len(text) <= cut else text[: cut - 1] + "…"


class BuildWatch:
    """Follows one build's chunks; `tick` emits progress when due (from any thread)."""

    def __init__(self, emit: Emit | None, step: str = "build", clock: Clock = time.monotonic,
                 interval: float = EVENT_INTERVAL, heartbeat: float = HEARTBEAT) -> None:
        self.emit, self.step, self.clock = emit, step, clock
        self.interval, self.heartbeat = interval, heartbeat
        self.started = self.step_started = clock()
        self.number = self.count = 0
        self.instruction = ""
        self.last = ""
        self.step_lines: deque[str] = deque(maxlen=FAIL_LINES)
        self.tail: deque[str] = deque(maxlen=KEEP_LINES)
        self.image_id: str | None = None
        self.error: str | None = None
        self.exit_code: int | None = None
        self._pending = ""
        self._last_emit: float | None = None
        self._changed = True
        self._lock = threading.Lock()

    def feed(self, chunk: Any) -> None:
        """One decoded chunk of the build's stream; anything but a mapping is passed over."""
        if not isinstance(chunk, dict):
            return
        for key in ("stream", "status"):
            if isinstance(chunk.get(key), str):
                self._text(chunk[key] if key == "stream" else chunk[key] + "\n")
        aux = chunk.get("aux")
        if isinstance(aux, dict) and isinstance(aux.get("ID"), str):
            self.image_id = aux["ID"][:80]
        if "error" in chunk or "errorDetail" in chunk:
            self._failed(chunk)
        self.tick()

    def finish(self) -> None:
        """The stream ended: a last line without its end counts."""
        if self._pending:
            self._line(self._pending)
            self._pending = ""

    def _text(self, text: str) -> None:
        parts = _BREAKS.split(self._pending + text)
        self._pending = parts.pop()
        if len(self._pending) > MAX_PENDING:
            parts.append(self._pending)
            self._pending = ""
        for part in parts:
            self._line(part)

    def _line(self, raw: str) -> None:
        raw = _STDERR_COLOUR.sub("", raw)
        line = shown(raw, LINE_CUT)
        if self.emit is not None:
            self.emit("build_output", step=self.step, data={"line": line})
        built = _BUILT.match(raw)
        if built:
            self.image_id = built.group(1)
        step = _STEP.match(raw)
        with self._lock:
            if step:
                self._step(int(step.group(1)), int(step.group(2)), step.group(3))
            elif raw.strip() and not _BUILDER.match(raw):
                self.last = shown(raw, SHOWN_CUT)
                self.step_lines.append(self.last)
                self.tail.append(self.last)
                self._changed = True

    def _step(self, number: int, count: int, instruction: str) -> None:
        self.number, self.count = number, count
        self.instruction = shown(instruction.strip(), INSTRUCTION_CUT)
        self.step_started, self.last, self._changed = self.clock(), "", True
        self.step_lines.clear()

    def _failed(self, chunk: dict[str, Any]) -> None:
        detail = chunk.get("errorDetail")
        detail = detail if isinstance(detail, dict) else {}
        message = chunk.get("error", detail.get("message", ""))
        raw = message if isinstance(message, str) else ""
        self.error = shown(raw, SHOWN_CUT) or "docker reported an error"
        found = _EXIT.search(raw)
        self.exit_code = int(found.group(1)) if found else None

    def tick(self) -> None:
        """Emit a `build_progress` event when one is due."""
        now = self.clock()
        with self._lock:
            if self._last_emit is not None:
                quiet = now - self._last_emit
                if quiet < self.interval or (not self._changed and quiet < self.heartbeat):
                    return
            self._last_emit, self._changed = now, False
            data = self.progress(now)
        if self.emit is not None:
            self.emit("build_progress", step=self.step, data=data)

    def progress(self, now: float) -> dict[str, Any]:
        return {"step_number": self.number, "step_count": self.count,
                "instruction": self.instruction, "line": self.last,
                "elapsed": round(now - self.started, 1),
                "step_elapsed": round(now - self.step_started, 1)}  # fmt: skip

    def where(self) -> str:
        if not self.number:
            return "before its first step"
        return f"at step {self.number}/{self.count} `{self.instruction}`"

    def failure(self) -> StepFailed:
        """The failed build as the step's failure: the instruction, its exit code, and the
        last lines of that step's output (in the output and, as a list, in the data)."""
        why = f"exit code {self.exit_code}" if self.exit_code is not None else self.error
        lines = list(self.step_lines)
        data: dict[str, Any] = {"instruction": self.instruction, "exit_code": self.exit_code,
                                "last_lines": lines}
        return StepFailed(f"docker build failed {self.where()}: {why}", retryable=False,
                          output="\n".join(lines), data=data)


@contextmanager
def heartbeat(watch: BuildWatch, period: float = 1.0) -> Iterator[None]:
    """While the block runs, a thread gives `watch` a tick every `period` seconds: progress
    goes on while docker's stream is silent."""
    stop = threading.Event()

    def beat() -> None:
        while not stop.wait(period):
            watch.tick()

    thread = threading.Thread(target=beat, name="build-heartbeat", daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join()
