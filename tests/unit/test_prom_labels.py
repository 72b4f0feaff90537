"""`rollout status --prom` (issue 28): a host's answer lands in label values (release,
version, state, the last exit's cause and how) and so does an inventory's host name; none of
its control characters reaches the file raw, and the file stays what the exposition format
and `promtool check metrics` accept."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path
from typing import Any

from prometheus_client.parser import text_string_to_metric_families
from test_status_metrics import promtool  # noqa: F401  (the fixture)

from rollout.output.escape import metric_label
from rollout.reports import prom

HOSTILE = ('a\x1b]0;pwned\x07\x1b[2J\x00b\rc\x7fd\x85e\x9bf\u202eg\u2066h\u2028i"j\\k\nl'
           "\ud800m")
LABELLED = ("host", "state", "release", "version", "last_exit_cause", "last_exit_how")
# Any C0 but the line feed that ends each line, DEL, C1, bidi and line separators.
RAW = re.compile("[\x00-\x09\x0b-\x1f\x7f-\x9f\u061c\u200e\u200f\u2028\u2029\u202a-\u202e"
                 "\u2066-\u2069]")


def _row(value: str) -> dict[str, Any]:
    return {"host": value, "state": value, "release": value, "version": value,
            "serving": True, "uptime_secs": 5.0, "last_exit": {"time": 900.0},
            "last_exit_cause": value, "last_exit_how": value}


def test_no_control_character_from_a_host_reaches_the_file_raw(tmp_path: Path) -> None:
    out = tmp_path / "rollout.prom"
    prom.write(out, [_row(HOSTILE)], 1000.0)
    data = out.read_bytes()
    text = data.decode("utf-8")  # a lone surrogate would not even encode
    assert not RAW.search(text), ascii(RAW.findall(text))
    # the format doubles the backslash of each escape: \\x1b is the text "\\x1b"
    assert "\\\\x1b]0;pwned\\\\x07" in text and "\\\\u202e" in text and "\\\\ud800" in text


def test_label_values_read_back_as_the_escaped_text() -> None:
    """Backslash, double quote and newline are the format's own escapes: the parser gives
    back exactly metric_label(value), the newline included."""
    families = {f.name: f for f in text_string_to_metric_families(
        prom.render([_row(HOSTILE)], 1000.0))}
    want = metric_label(HOSTILE)
    assert '"j\\k\nl' in want and "\x1b" not in want
    info = families["rollout_release_info"].samples[0].labels
    assert info == {"host": want, "release": want, "version": want}
    last = families["rollout_daemon_last_exit_timestamp_seconds"].samples[0].labels
    assert last == {"host": want, "cause": want, "how": want}
    states = families["rollout_daemon_state"].samples
    assert [s.value for s in states if s.labels["state"] == want] == [1.0]


def test_metric_label_is_the_one_rule() -> None:
    assert metric_label("plain-host_1.example") == "plain-host_1.example"
    assert metric_label("\x1b[31m") == "\\x1b[31m"
    assert metric_label("a\nb") == "a\nb"  # the text format escapes it (\n)
    assert metric_label("\r\x00\x7f\x9b\u202e") == "\\r\\x00\\x7f\\x9b\\u202e"
    assert metric_label(None) == "None" and metric_label(3) == "3"


def test_promtool_accepts_hostile_labels(promtool: str, tmp_path: Path) -> None:  # noqa: F811
    out = tmp_path / "rollout.prom"
    prom.write(out, [_row(HOSTILE), _row("ok")], 1000.0)
    check = subprocess.run([promtool, "check", "metrics"], input=out.read_text(),
                           capture_output=True, text=True, timeout=60)
    assert check.returncode == 0 and check.stdout + check.stderr == "", (
        check.stdout + check.stderr)
