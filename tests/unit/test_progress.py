"""Progress on long work (issue 19): the rate and time-left model, when a transfer is worth an
event and a plain line, the console's rendering, and the host's progress lines as hostile
data. Clocks are injected: nothing here sleeps."""

from __future__ import annotations

import io
import json
from typing import Any

import pytest
from contexts import host_context
from fakehost import CannedStream

from rollout.errors import StepFailed
from rollout.output.console import ConsoleSink, make_console
from rollout.output.events import Event
from rollout.output.progress import (
    PlainLines,
    Progress,
    RateMeter,
    Tracker,
    format_progress,
    parse_host_progress,
)
from rollout.steps.base import HostContext
from rollout.steps.decision import Artifact, Release
from rollout.steps.pull import follow, parse_report

MB = 1_000_000


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


class Recorder:
    def __init__(self) -> None:
        self.events: list[tuple[str, dict[str, Any]]] = []

    def __call__(self, kind: str, **fields: Any) -> None:
        self.events.append((kind, fields))

    @property
    def data(self) -> list[dict[str, Any]]:
        return [f["data"] for k, f in self.events if k == "progress"]


def test_rate_and_time_left_from_samples() -> None:
    meter = RateMeter(window=10.0)
    assert meter.add(0.0, 0) is None  # one sample: no rate yet
    assert meter.add(2.0, 10 * MB) == pytest.approx(5 * MB)
    assert meter.add(4.0, 20 * MB) == pytest.approx(5 * MB)
    # older samples leave the window: the rate follows what happens now
    assert meter.add(20.0, 22 * MB) == pytest.approx(2 * MB / 16, rel=0.01)
    assert meter.add(30.0, 42 * MB) == pytest.approx(2 * MB)  # the last 10 s only
    p = Progress("pull", 50 * MB, 200 * MB, 5 * MB, 10.0)
    assert p.eta == pytest.approx(30.0) and p.percent == 25.0 and not p.finished
    assert Progress("pull", 5, 10, None, 1.0).eta is None
    assert Progress("pull", 10, 10, None, 1.0).eta == 0.0


def test_a_tracker_emits_at_most_one_event_a_second_the_first_and_last_always() -> None:
    clock, emit = Clock(), Recorder()
    tracker = Tracker(emit, "upload", "pull", 200 * MB, clock=clock)
    assert tracker.update(0) is not None  # the first
    for _ in range(9):  # ten updates within a second: none of them
        clock.now += 0.1
        assert tracker.update(int((clock.now - 1000) * 5 * MB)) is None
    clock.now += 0.1
    progress = tracker.update(5 * MB)
    assert progress is not None and progress.rate == pytest.approx(5 * MB)
    assert emit.data[-1]["bytes"] == 5 * MB and emit.data[-1]["eta"] == pytest.approx(39.0)
    clock.now += 0.2
    assert tracker.update(999 * MB) is not None  # the last, at once; clamped to the total
    assert emit.data[-1]["bytes"] == 200 * MB and emit.data[-1]["eta"] == 0.0
    clock.now += 5
    assert tracker.update(200 * MB) is None  # ended: never again
    assert [k for k, _ in emit.events] == ["progress"] * 3
    assert all(f["step"] == "upload" for _, f in emit.events)


def test_plain_lines_every_ten_seconds_or_quarter_whichever_first() -> None:
    lines = PlainLines(interval=10.0, step=25)
    key = ("lab-1", "pull")
    assert lines.due(key, 0.0, 0.0, False)  # the first
    assert not lines.due(key, 1.0, 5.0, False)
    assert not lines.due(key, 9.9, 24.9, False)
    assert lines.due(key, 10.0, 24.9, False)  # 10 s passed
    assert lines.due(key, 11.0, 25.0, False)  # crossed 25 %
    assert not lines.due(key, 12.0, 30.0, False)
    assert lines.due(key, 13.0, 80.0, False)  # crossed 50 and 75 %: one line
    assert lines.due(key, 13.5, 100.0, True)  # the last, always
    assert lines.due(("lab-2", "pull"), 13.5, 1.0, False)  # per host
    assert not lines.due(("lab-2", "pull"), 14.0, 2.0, False)
    lines.forget("lab-2")  # its step ended (failed): a retry's first line is shown
    assert lines.due(("lab-2", "pull"), 14.5, 0.0, False)


def _progress_event(host: str, done: int, total: int, at: float, **extra: Any) -> Event:
    data = {"what": "pull", "bytes": done, "total": total, "rate": 5 * MB, "eta": 3.0, **extra}
    return Event("progress", "r", host, "upload", data=data, time=at)


def test_the_console_without_a_terminal_prints_whole_lines_now_and_then() -> None:
    stream = io.StringIO()
    sink = ConsoleSink(make_console(stream))
    sink(Event("connecting", "r", "lab-1", "upload",
               reason="connecting to http://x/r (connect timeout 10 s)"))
    for second in range(40):  # a sample a second, 5 MB/s of 200 MB
        sink(_progress_event("lab-1", second * 5 * MB, 200 * MB, 1000.0 + second))
    sink(_progress_event("lab-1", 200 * MB, 200 * MB, 1040.0))
    out = stream.getvalue()
    assert "\r" not in out and "\x1b[" not in out
    lines = out.splitlines()
    assert lines[0].startswith("lab-1") and "connect timeout 10 s" in lines[0]
    progress = lines[1:]
    percents = [line.split("(")[1].split(")")[0] for line in progress]
    assert percents == ["0%", "25%", "50%", "75%", "100%"], progress  # not one per event
    assert "pull 0 B / 190.7 MiB (0%)" in progress[0]
    assert "4.8 MiB/s, 3 s left" in progress[2]
    assert progress[-1].rstrip().endswith("(100%) 4.8 MiB/s")


def test_quiet_shows_no_progress_and_a_fallback_is_a_line() -> None:
    quiet, loud = io.StringIO(), io.StringIO()
    for stream, flag in ((quiet, True), (loud, False)):
        sink = ConsoleSink(make_console(stream), quiet=flag)
        sink(_progress_event("lab-1", 0, 10, 0.0))
        sink(Event("fallback", "r", "lab-1", "upload",
                   reason="the host could not reach http://x: refused; pushing"))
    assert quiet.getvalue() == ""
    assert "fallback" in loud.getvalue() and "could not reach" in loud.getvalue()


def test_format_progress_survives_odd_data() -> None:
    assert format_progress({}) == " 0 B / 0 B (100%)"
    text = format_progress({"what": "push", "bytes": True, "total": "x", "rate": "fast"})
    assert text.startswith("push 0 B / 0 B")


NAMES = {"cuzk-daemon", "cuzk-bench"}


@pytest.mark.parametrize("line", [
    "",
    "progress 5",
    '{"progress": {"file": "cuzk-daemon", "bytes": -1}}',
    '{"progress": {"file": "cuzk-daemon", "bytes": true}}',
    '{"progress": {"file": "cuzk-daemon", "bytes": 1.5}}',
    '{"progress": {"file": "cuzk-daemon", "bytes": "7"}}',
    '{"progress": {"file": "cuzk-daemon", "bytes": NaN}}',
    '{"progress": {"file": "../etc/passwd", "bytes": 1}}',
    '{"progress": {"file": ["cuzk-daemon"], "bytes": 1}}',
    '{"progress": ["cuzk-daemon", 1]}',
    '{"progress": {"file": "cuzk-daemon", "bytes": 1',
    '{"progress": {"file": "cuzk-daemon", "bytes": 1, "pad": "' + "x" * 600 + '"}}',
    '{"progress": {"file": "cuzk-daemon", "bytes": 1}} \x1b[2J',
    '[' * 100_000,
])
def test_hostile_progress_lines_are_ignored(line: str) -> None:
    assert parse_host_progress(line, NAMES) is None


def test_a_progress_line() -> None:
    line = json.dumps({"progress": {"file": "cuzk-bench", "bytes": 4096}})
    assert parse_host_progress(line, NAMES) == ("cuzk-bench", 4096)


@pytest.mark.parametrize("line", ["", "{", "[1]", '{"files": 3}', '{"error": null}',
                                  '{"files": {}, "x": "' + "y" * 70_000 + '"}'])
def test_hostile_reports_are_not_reports(line: str) -> None:
    assert parse_report(line) is None


def _ctx(emit: Recorder) -> HostContext:
    return host_context(emit=emit)


RELEASE = Release("0123456789ab", "img", "v1", (
    Artifact("cuzk-daemon", "/x/cuzk-daemon", "a" * 64, 300),
    Artifact("cuzk-bench", "/x/cuzk-bench", "b" * 64, 100),
), source="http://web/r")


BOOM = b"Traceback: boom\n"  # what the host's download wrote on its stderr


def test_follow_turns_host_lines_into_events_and_ignores_the_hostile_ones() -> None:
    emit = Recorder()
    report = {"files": {"cuzk-daemon": {"received": 300}}, "error": None}
    lines = [
        '{"progress": {"file": "cuzk-daemon", "bytes": 300000000}}',  # past its size
        "Traceback (most recent call last): garbage \x00\xff",
        '{"progress": {"file": "evil", "bytes": 99999}}',
        '{"progress": {"file": "cuzk-daemon", "bytes": 300}}',
        '{"progress": {"file": "cuzk-bench", "bytes": 100}}',
        json.dumps(report),
    ]
    assert follow(_ctx(emit), CannedStream(lines, BOOM), RELEASE) == report
    sent = emit.data
    # a file counts up to its own size, never for the others: 300 of 400, not all of it
    assert sent[0]["bytes"] == 300 and sent[0]["total"] == 400 and sent[0]["what"] == "pull"
    assert sent[-1]["bytes"] == 400  # the last one always, however soon


def test_a_download_that_ends_without_its_report_fails_the_step() -> None:
    with pytest.raises(StepFailed, match="without its report: Traceback: boom"):
        line = '{"progress": {"file": "cuzk-bench", "bytes": 1}}'
        follow(_ctx(Recorder()), CannedStream([line], BOOM), RELEASE)
