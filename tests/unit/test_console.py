"""The console without a terminal (plain full lines), under NO_COLOR, and with --quiet."""

from __future__ import annotations

import io
import os

import pytest

from rollout.output.console import ConsoleSink, make_console
from rollout.output.events import Event

LONG = "x" * 150


def _events() -> list[Event]:
    return [
        Event("step_end", "r", "lab-1", "upload", "changed", "uploaded", {"duration": 1.0}),
        Event("step_end", "r", "lab-1", "start", "failed", f"died {LONG}", {"duration": 2.0}),
        Event("host_end", "r", "lab-1", status="rolled_back", reason="start failed"),
        Event("host_end", "r", "lab-2", status="validated", reason="ok"),
    ]


def _printed(quiet: bool) -> str:
    stream = io.StringIO()
    sink = ConsoleSink(make_console(stream), quiet=quiet)
    for event in _events():
        sink(event)
    return stream.getvalue()


def test_without_a_terminal_lines_are_whole_and_plain() -> None:
    lines = _printed(quiet=False).splitlines()
    assert len(lines) == 4
    assert lines[1].startswith("lab-1") and lines[1].endswith(f"{LONG} (2.0s)")
    assert "\x1b[" not in "".join(lines)


def test_quiet_prints_only_failures() -> None:
    lines = _printed(quiet=True).splitlines()
    assert [line.split()[1] for line in lines] == ["start", "ROLLED_BACK"]


def _on_a_terminal() -> str:
    master, slave = os.openpty()
    with os.fdopen(slave, "w", encoding="utf-8") as tty:
        console = make_console(tty)
        ConsoleSink(console)(_events()[1])
        tty.flush()
        return os.read(master, 65536).decode("utf-8", "replace")


@pytest.mark.parametrize("no_color", ["", "1"])
def test_colour_on_a_terminal_unless_no_color(monkeypatch: pytest.MonkeyPatch,
                                              no_color: str) -> None:
    monkeypatch.setenv("NO_COLOR", no_color)
    monkeypatch.setenv("TERM", "xterm-256color")
    monkeypatch.delenv("FORCE_COLOR", raising=False)
    out = _on_a_terminal()
    assert "died" in out
    assert ("\x1b[" in out) is (not no_color), repr(out)
