"""What hosts print is hostile data wherever it is shown (issue 18): control characters are
escaped in the console, status, diagnose and every report; rich markup is text; TOML keys
from templates and vars are quoted; the exit-70 message is redacted and escaped."""

from __future__ import annotations

import io
import tomllib
import xml.etree.ElementTree as ET
from importlib import resources
from typing import Any

import pytest
from invoke.exceptions import Exit

from rollout.cli.errors import reports_errors
from rollout.config.render import render_runtime
from rollout.config.tomlkey import toml_key
from rollout.output.console import ConsoleSink, make_console, print_table
from rollout.output.escape import control_escaped, html_text, report_text
from rollout.output.events import Event
from rollout.reports.output import printable
from rollout.reports.summary import cell
from rollout.secrets import register

HOSTILE = ("died\x1b]0;owned\x07\x1b[2J\x1b[H\r\nlab-2      validate   ok       "
           "[bold]forged[/] \u202eevil\x9b")


def _raw(text: str) -> list[str]:
    return [c for c in ("\x1b", "\x07", "\r", "\u202e", "\x9b") if c in text]


def test_one_console_line_per_event_whatever_the_host_printed() -> None:
    stream = io.StringIO()
    sink = ConsoleSink(make_console(stream))
    sink(Event("step_end", "r", "lab-1", "validate", "failed", HOSTILE, {"duration": 1.0}))
    sink(Event("host_end", "r", "lab-1\x1b[31m", status="rolled_back", reason=HOSTILE))
    out = stream.getvalue()
    assert not _raw(out), repr(out)
    lines = out.splitlines()
    assert len(lines) == 2 and all(ln.startswith("lab-1") for ln in lines), lines
    assert "\\x1b]0;owned\\x07" in out and "\\n" in out and "[bold]forged[/]" in out


def test_a_status_table_cell_escapes_control_characters(capsys: pytest.CaptureFixture[str],
                                                        ) -> None:
    print_table([{"host": "h\x1b[2J", "cause": HOSTILE}], ["host", "cause"])
    out = capsys.readouterr().out
    assert not _raw(out) and "\\x1b[2J" in out


def test_report_text_keeps_lines_and_escapes_the_rest() -> None:
    assert report_text("a\nb\tc\x1b[2Jd\re") == "a\nb\tc\\x1b[2Jd\\re"
    assert control_escaped("a\nb") == "a\\nb"
    assert html_text("<b>\x1b</b>") == "&lt;b&gt;\\x1b&lt;/b&gt;"


def test_junit_and_markdown_carry_no_control_character() -> None:
    junit = printable(HOSTILE)
    assert not _raw(junit) and "\\x1b]0;owned" in junit
    ET.fromstring(f"<a>{junit.replace('&', '&amp;').replace('<', '&lt;')}</a>")  # valid XML
    md = cell(HOSTILE)
    assert not _raw(md) and "\n" not in md and "\\[bold\\]" in md


def test_the_html_report_escapes_control_characters() -> None:
    from rollout.reports import html

    assert "\x1b" not in html.escape(HOSTILE) and "\\x1b" in html.escape(HOSTILE)


def test_diagnose_and_status_print_escaped_lines(capsys: pytest.CaptureFixture[str],
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    from rollout.commands import diagnose, status

    monkeypatch.setattr(diagnose, "collect", lambda plan: ["ev"])
    monkeypatch.setattr(diagnose, "report_dict", lambda ev: {"reachable": True})
    monkeypatch.setattr(diagnose, "render_text", lambda r: f"log: {HOSTILE}\n")
    diagnose.diagnose(None, as_json=False)  # type: ignore[arg-type]
    status.print_status([{"host": "h1", "state": "running", "serving": True,
                          "guards": [HOSTILE]}], as_json=False)
    out = capsys.readouterr().out
    assert not _raw(out), repr(out)
    assert "\\x1b]0;owned\\x07" in out


# ---------------------------------------------------------------- TOML keys

@pytest.mark.parametrize(
    ("key", "shown"),
    [("pool_mib", "pool_mib"), ("a-b_9", "a-b_9"), ("a b", '"a b"'),
     ("x]\n[evil", '"x]\\u000a[evil"'),
     ('q"\\', '"q\\"\\\\"'), ("", '""'), ("é", '"é"'), ("a\x7f", '"a\\u007f"')],
)
def test_toml_keys_are_bare_only_when_toml_allows(key: str, shown: str) -> None:
    assert toml_key(key) == shown
    assert tomllib.loads(f"{shown} = 1") == {key: 1}


def _config(extra: dict[str, Any]) -> dict[str, Any]:
    text = (resources.files("rollout") / "resources" / "templates" / "cuzk.toml.j2").read_text()
    daemon = {"listen": "127.0.0.1:9820", "status_listen": "", "safety_margin": "5GiB",
              "gpu_devices": [], "gpu_threads": 2, "param_cache": "/data/zk/params"}
    context = {"host": {"name": "h"}, "daemon": daemon, "total_budget": "1MiB",
               "extra_config": extra}
    return tomllib.loads(render_runtime(text, context))


def test_extra_config_keys_cannot_add_tables_or_keys() -> None:
    hostile = {"lab]\n[memory": {"total_budget = \"999GiB\"\nx": 1, "ok": "v"}}
    doc = _config(hostile)
    assert doc["memory"] == {"total_budget": "1MiB", "safety_margin": "5GiB"}
    assert doc["lab]\n[memory"] == {"total_budget = \"999GiB\"\nx": 1, "ok": "v"}


# ---------------------------------------------------------------- exit 70

def test_the_exit_70_message_is_redacted_and_escaped(capsys: pytest.CaptureFixture[str]) -> None:
    register("hunter2-secret")

    @reports_errors
    def boom() -> None:
        raise RuntimeError("token hunter2-secret\x1b]0;owned\x07\nforged line")

    with pytest.raises(Exit) as info:
        boom()
    assert info.value.code == 70
    message = str(info.value.message)
    assert "hunter2-secret" not in message and "********" in message
    assert not _raw(message) and "\n" not in message and "\\x1b]0;owned" in message
    trace = capsys.readouterr().err
    assert "hunter2-secret" not in trace and "\x1b" not in trace and "RuntimeError" in trace
