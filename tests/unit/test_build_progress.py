"""A build you can watch (issue 29): docker's build stream, faked, followed as progress events
(at most one a second, at least one every few seconds while a step is silent), every line for
-v and never in the journal, and a failed step's instruction, exit code and last lines on the
console, in JUnit and in the summary; docker's text escaped, cut and masked."""

from __future__ import annotations

import io
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from docker.errors import ImageNotFound
from junitparser import Failure, JUnitXml

from rollout import masking
from rollout.errors import StepFailed
from rollout.output.console import ConsoleSink, make_console
from rollout.output.events import Event, EventBus, JsonLinesSink
from rollout.reports import junit, summary
from rollout.reports.output import ReportSink
from rollout.reports.runlog import fold
from rollout.secrets import register
from rollout.steps import image
from rollout.steps.buildwatch import FAIL_LINES, LINE_CUT, MAX_PENDING, SHOWN_CUT, BuildWatch

RUN = "RUN echo 'error: boom' >&2; exit 3"
FAILED_RUN: list[dict[str, Any]] = [
    {"stream": "Step 1/2 : FROM rollout-lab/base\n"},
    {"stream": " ---> 0123456789ab\n"},
    {"stream": f"Step 2/2 : {RUN}\n"},
    {"stream": " ---> Running in fedcba987654\n"},
    *({"stream": f"compiling unit {i}\n"} for i in range(15)),
    {"stream": "\x1b[91merror: boom\n\x1b[0m"},  # the classic builder's stderr, in red
    {"stream": "Removing intermediate container fedcba987654\n"},
    {"errorDetail": {"code": 3, "message": f"The command '/bin/sh -c {RUN[4:]}' returned a "
                     "non-zero code: 3"},
     "error": f"The command '/bin/sh -c {RUN[4:]}' returned a non-zero code: 3"},
]


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


class Recorder:
    def __init__(self) -> None:
        self.events: list[tuple[str, dict[str, Any]]] = []

    def __call__(self, kind: str, **fields: Any) -> None:
        self.events.append((kind, fields))

    def of(self, kind: str) -> list[dict[str, Any]]:
        return [f["data"] for k, f in self.events if k == kind]


@pytest.fixture(autouse=True)
def no_secrets(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(masking, "_known", set())


def watch() -> tuple[BuildWatch, Recorder, Clock]:
    emit, clock = Recorder(), Clock()
    return BuildWatch(emit, clock=clock), emit, clock


def test_progress_at_most_one_event_a_second_however_fast_the_output() -> None:
    w, emit, clock = watch()
    w.feed({"stream": "Step 1/3 : RUN make\n"})
    for i in range(300):  # 3 s of output, a line every 10 ms
        clock.now += 0.01
        w.feed({"stream": f"line {i}\n"})
    progress = emit.of("build_progress")
    assert 3 <= len(progress) <= 4
    assert len(emit.of("build_output")) == 301
    assert progress[-1]["step_number"] == 1 and progress[-1]["step_count"] == 3
    assert progress[-1]["instruction"] == "RUN make" and progress[-1]["line"].startswith("line ")


def test_a_silent_step_still_gets_a_progress_event_every_few_seconds() -> None:
    w, emit, clock = watch()
    w.feed({"stream": "Step 2/3 : RUN sleep 600\n"})
    assert len(emit.of("build_progress")) == 1
    for _ in range(40):  # the heartbeat's ticks, 0.5 s apart: 20 s with no output
        clock.now += 0.5
        w.tick()
    progress = emit.of("build_progress")
    assert 4 <= len(progress) <= 5
    assert progress[-1]["step_elapsed"] >= 15 and progress[-1]["instruction"] == "RUN sleep 600"


def test_docker_text_is_escaped_cut_and_bounded() -> None:
    w, emit, _ = watch()
    w.feed({"stream": "Step 1/1 : RUN \x1b]0;title\x07 x\n"})
    w.feed({"stream": "\x1b[2J[bold]forged\u202e line\r\n" + "y" * 5000 + "\n"})
    w.feed({"stream": "z" * (MAX_PENDING + 10)})  # a line that never ends
    w.finish()
    lines = [d["line"] for d in emit.of("build_output")]
    assert "\\x1b[2J[bold]forged\\u202e line" in lines
    assert all("\x1b" not in line and "\x07" not in line for line in lines)
    assert max(len(line) for line in lines) <= LINE_CUT
    assert "\\x1b]0;title\\x07" in w.instruction
    assert all(len(line) <= SHOWN_CUT for line in w.step_lines)
    assert len(w._pending) == 0


def test_a_failed_run_names_its_instruction_exit_code_and_last_lines() -> None:
    w, _, _ = watch()
    for chunk in FAILED_RUN:
        w.feed(chunk)
    failure = w.failure()
    assert isinstance(failure, StepFailed) and not failure.retryable
    assert str(failure) == f"docker build failed at step 2/2 `{RUN}`: exit code 3"
    lines = failure.data["last_lines"]
    assert len(lines) == FAIL_LINES and lines[-1] == "error: boom"
    assert "Running in" not in failure.output and failure.output.endswith("error: boom")
    assert failure.data["exit_code"] == 3


def test_the_failure_lines_are_masked() -> None:
    register("s3cr3t-build-token")
    w, emit, _ = watch()
    w.feed({"stream": "Step 1/1 : RUN make\n"})
    w.feed({"stream": "token=s3cr3t-build-token\n"})
    w.feed({"error": "The command '/bin/sh -c make' returned a non-zero code: 2"})
    failure = w.failure()
    assert "s3cr3t" not in failure.output and "s3cr3t" not in repr(emit.events)
    assert str(failure).endswith("exit code 2")


class FakeImages:
    def __init__(self) -> None:
        self.built: str | None = None

    def get(self, name: str) -> Any:
        if self.built is None or name not in (self.built, "sha256:feed"):
            raise ImageNotFound(name)
        return SimpleNamespace(short_id="feed", id="sha256:feed", tag=lambda *a: True)


class FakeClient:
    def __init__(self, chunks: list[dict[str, Any]]) -> None:
        self.chunks = chunks
        self.images = FakeImages()
        self.api = SimpleNamespace(build=self.build)

    def build(self, tag: str, **kwargs: Any) -> Any:
        assert kwargs["decode"] is True
        yield from self.chunks
        if not any("error" in c for c in self.chunks):
            self.images.built = tag


def context(tmp_path: Path, client: FakeClient, emit: Recorder) -> image.ControllerContext:
    (tmp_path / "ctx").mkdir()
    (tmp_path / "ctx/Dockerfile").write_text("FROM scratch\n")
    spec = SimpleNamespace(context=str(tmp_path / "ctx"), tag="rollout/t:v1", target=None,
                           dockerfile=str(tmp_path / "ctx/Dockerfile"), build_args=lambda: {})
    ctx = image.ControllerContext(spec, "v1", tmp_path / "cache", emit=emit)  # type: ignore[arg-type]
    ctx._client = client
    return ctx


def test_the_build_step_streams_and_keeps_only_the_last_lines(tmp_path: Path) -> None:
    lines = [{"stream": f"l{i}\n"} for i in range(50)]
    chunks: list[dict[str, Any]] = [{"stream": "Step 1/1 : RUN make\n"}, *lines,
                                    {"aux": {"ID": "sha256:feed"}},
                                    {"stream": "Successfully built feed\n"}]
    emit = Recorder()
    result = image.build(context(tmp_path, FakeClient(chunks), emit), {})
    assert result.status.value == "changed" and result.output.endswith("l49")
    assert len(result.output.splitlines()) == 20
    assert len(emit.of("build_output")) == 52 and emit.of("build_progress")


def test_the_build_step_fails_with_the_step_and_its_lines(tmp_path: Path) -> None:
    emit = Recorder()
    with pytest.raises(StepFailed, match="step 2/2 .*exit code 3") as raised:
        image.build(context(tmp_path, FakeClient(FAILED_RUN), emit), {})
    assert raised.value.data["last_lines"][-1] == "error: boom"


def console(verbose: bool = False) -> tuple[ConsoleSink, io.StringIO]:
    out = io.StringIO()
    return ConsoleSink(make_console(out), verbose=verbose), out


def test_verbose_prints_every_line_and_the_journal_keeps_none(tmp_path: Path) -> None:
    bus, journal = EventBus("r1"), io.StringIO()
    plain, plain_out = console()
    loud, loud_out = console(verbose=True)
    report = ReportSink(lambda r: "", lambda text: None)
    for sink in (plain, loud, JsonLinesSink(journal, durable=True), report):
        bus.subscribe(sink)
    w = BuildWatch(bus.emit)
    for chunk in FAILED_RUN[:6]:
        w.feed(chunk)
    assert "| compiling unit 1" in loud_out.getvalue()
    assert "compiling unit 1" not in plain_out.getvalue()
    assert "build_output" not in journal.getvalue() and "build_progress" in journal.getvalue()
    assert all(e.kind != "build_output" for e in bus.history + report.events)


def progress_event(t: float, number: int, line: str) -> Event:
    return Event("build_progress", "r1", step="build", time=t,
                 data={"step_number": number, "step_count": 3, "instruction": "RUN make",
                       "line": line, "elapsed": t, "step_elapsed": t})


def test_off_a_terminal_a_line_at_each_step_and_every_four_seconds() -> None:
    sink, out = console()
    for t, number in ((0, 1), (1, 1), (2, 2), (5, 2), (11, 2), (15, 2), (22, 2)):
        sink(progress_event(t, number, f"at {t}[red]"))
    shown = out.getvalue().splitlines()
    assert [line.split(": ")[-1] for line in shown] == ["at 0[red]", "at 2[red]", "at 11[red]",
                                                           "at 15[red]", "at 22[red]"]
    assert "step 2/3 RUN make" in shown[1]


def failed_build_events(bus: EventBus) -> None:
    w = BuildWatch(None)
    for chunk in FAILED_RUN:
        w.feed(chunk)
    failure = w.failure()
    bus.emit("run_start", data={"version": "v1", "batches": []})
    bus.emit("step_start", step="build", data={"kind": "build"})
    bus.emit("step_end", step="build", status="failed", reason=str(failure),
             data={**failure.data, "duration": 2.0, "attempts": 1, "output": failure.output})
    bus.emit("run_end", status="failed", reason="controller steps failed", data={})


def test_a_failed_build_shows_its_last_lines_on_the_console_in_junit_and_the_summary(
    tmp_path: Path,
) -> None:
    bus = EventBus("r1")
    sink, out = console()
    bus.subscribe(sink)
    failed_build_events(bus)
    assert "exit code 3" in out.getvalue() and "  | error: boom" in out.getvalue()
    record = fold(bus.history)
    (tmp_path / "junit.xml").write_text(junit.render(record))
    case = next(iter(next(iter(JUnitXml.fromfile(str(tmp_path / "junit.xml"))))))
    failure = next(r for r in case.result if isinstance(r, Failure))
    assert "exit code 3" in failure.message and "error: boom" in (failure.text or "")
    text = summary.render(record)
    assert "<pre>" in text and "error: boom" in text and "&#x27;" not in text


def test_on_a_terminal_a_live_line_that_the_step_end_takes_away() -> None:
    from rich.console import Console

    sink = ConsoleSink(Console(file=io.StringIO(), force_terminal=True, width=120))
    sink(progress_event(0, 1, "compiling"))
    assert sink._live is not None and list(sink._tasks) == [("controller", "build")]
    sink(Event("step_end", "r1", step="build", status="changed", reason="built",
               data={"duration": 1.0}))
    assert sink._live is None and not sink._tasks
