"""Reports rendered from plain events: JUnit (read back by junitparser), the Markdown
summary, the HTML page, and Prometheus metrics (read back by prometheus_client)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from conftest import CliResult, CliRunner
from junitparser import Failure, JUnitXml, Skipped
from prometheus_client.parser import text_string_to_metric_families

from rollout.output.events import Event, EventBus
from rollout.reports import html, junit, prom, summary
from rollout.reports.drain_curve import drain_curves
from rollout.reports.output import write_atomic
from rollout.reports.runlog import fold
from rollout.reports.sinks import report_sinks

EVIL = '<script>alert("x")</script>|`*_[a](b)\x1b[31m'


def _run(bus: EventBus) -> None:
    t = 1_700_000_000.0
    bus.emit("run_start", data={"version": "v2", "batches": [["h1"], ["h2", "h3"]]})
    steps: list[tuple[str, str, str, str, dict[str, Any]]] = [
        ("h1", "upload", "upload", "changed", {}),
        ("h1", "drain", "drain", "ok", {"samples": [[t, 300], [t + 1, 200], [t + 2, 10]],
                                         "started": t, "threshold": 0.1,
                                         "memory": {"usage": 10, "limit": 1000}}),
        ("h1", "start", "start", "failed", {"output": f"boom {EVIL}"}),
        ("h1", "rollback-drain", "drain", "ok", {"samples": [[0.0, 950], [0.5, 5]],
                                                  "budget": 900, "memory": {"limit": 1000}}),
        ("h1", "rollback-validate", "validate", "ok", {}),
    ]
    for host, name, kind, status, data in steps:
        bus.emit("step_start", host=host, step=name, data={"kind": kind})
        reason = EVIL if status == "failed" else f"{name} done"
        bus.emit("step_end", host=host, step=name, status=status, reason=reason,
                 data={"duration": 1.0, "attempts": 1, **data})
    bus.emit("host_end", host="h1", status="rolled_back", reason=f"start failed: {EVIL}",
             data={"release": "abc", "cause": "start failed"})
    bus.emit("run_end", status="failed", reason="canary batch failed: rollout stopped",
             data={"h2": {"reason": "canary batch failed"}, "h3": {"reason": "x"}})


def _record() -> Any:
    bus = EventBus("run-1")
    _run(bus)
    return fold(bus.history)


def test_junit_one_suite_one_case_per_host(tmp_path: Path) -> None:
    path = tmp_path / "junit.xml"
    write_atomic(path, junit.render(_record()))
    suites = list(JUnitXml.fromfile(str(path)))
    assert len(suites) == 1 and suites[0].tests == 3 and suites[0].failures == 1
    cases = {c.name: c for c in suites[0]}
    failure = next(r for r in cases["h1"].result if isinstance(r, Failure))
    assert failure.type == "rolled_back" and EVIL.replace("\x1b", "\\x1b") in failure.message
    assert "--- output tail of start ---\nboom" in (failure.text or "")
    assert "rollback-validate" in cases["h1"].system_out
    assert all(isinstance(cases[h].result[0], Skipped) for h in ("h2", "h3"))


def test_summary_escapes_values_and_lists_changes() -> None:
    text = summary.render(_record())
    assert "<script>" not in text and "&lt;script&gt;" in text
    row = next(line for line in text.splitlines() if line.startswith("| h1 |"))
    assert row.count(" | ") == 5, row  # the value's | does not open a column
    assert "| upload |" in row and "rolled\\_back" in row
    assert "canary batch failed" in text


def test_html_has_a_bar_per_step_and_a_curve_per_drain() -> None:
    record = _record()
    page = html.render(record)
    assert "<script>" not in page and "&lt;script&gt;" in page
    assert page.count('<rect class="step ') == 5
    assert page.count('class="step status-failed" data-host="h1" data-step="start"') == 1
    assert page.count(" rollback\" data-host") == 2 and page.count('class="rollback-mark"') == 1
    assert page.count('<polyline class="curve" data-host="h1"') == 2
    assert "http" not in page.replace('xmlns="http://www.w3.org/2000/svg"', "")


def test_drain_curve_reads_unix_times_and_seconds() -> None:
    first, second = drain_curves(_record())
    assert first.points == [(0.0, 300.0), (1.0, 200.0), (2.0, 10.0)]
    assert first.line == 100.0 and first.line_label == "drained below 100B"
    assert second.points[-1] == (0.5, 5.0) and second.limit == 1000
    assert second.line == 100
    assert second.line_label == "new daemon fits below 100B (limit - its budget 900B)"


def _drain_record(samples: list[list[float]], **data: Any) -> Any:
    bus = EventBus("run-4")
    bus.emit("run_start", data={"version": "v2", "batches": [["h1"]]})
    bus.emit("step_start", host="h1", step="drain", data={"kind": "drain"})
    bus.emit("step_end", host="h1", step="drain", status="ok", reason="drained",
             data={"duration": 0.2, "attempts": 1, "samples": samples, "outcome": "drained",
                   "budget": 400 << 20, "memory": {"limit": 512 << 20}, **data})
    bus.emit("run_end", status="ok", reason="done", data={})
    return fold(bus.history)


def _curve_xs(page: str) -> list[float]:
    points = page.split('<polyline class="curve"', 1)[1].split('points="', 1)[1].split('"')[0]
    return [float(p.split(",")[0]) for p in points.split()]


def test_a_drain_under_a_second_draws_its_curve() -> None:
    # What a lab drain records when the memory is back at the first look: one sample.
    record = _drain_record([[0.001, 41717760]], started=1000.0, ended=1000.032)
    (curve,) = drain_curves(record)
    assert curve.points == [(0.001, 41717760.0), (0.032, 41717760.0)]
    page = html.render(record)
    xs = _curve_xs(page)
    assert len(xs) == 2 and xs[1] - xs[0] > 300  # a line across the chart, not a dot
    assert ">32 ms</text>" in page  # the time axis ends where the drain did, in ms
    # No started/ended (an older journal): held for the step's duration.
    (old,) = drain_curves(_drain_record([[0.0, 300.0]]))
    assert old.points == [(0.0, 300.0), (0.2, 300.0)]
    # Several samples within a second are drawn as recorded.
    (quick,) = drain_curves(_drain_record([[0.0, 9.0], [0.25, 5.0], [0.5, 1.0]], ended=0.0))
    assert quick.points == [(0.0, 9.0), (0.25, 5.0), (0.5, 1.0)]


def test_html_labels_say_what_they_mean() -> None:
    page = html.render(_drain_record([[0.0, 500 << 20], [0.4, 50 << 20]]))
    for label in ("working set (bytes)", "seconds since the drain began", "seconds from start",
                  "cgroup memory limit 512.0MiB",
                  "new daemon fits below 112.0MiB (limit - its budget 400.0MiB)",
                  "<th>took</th>", "<th>release id</th>", "<th>steps that changed the host</th>",
                  "h1, step drain: drained", " · took "):
        assert label in page, label
    assert "fits below</text>" not in page and ">400 ms</text>" in page


def test_sinks_write_when_the_run_ends(tmp_path: Path) -> None:
    step_summary = tmp_path / "gh" / "summary.md"
    step_summary.parent.mkdir()
    step_summary.write_text("earlier step\n")
    bus = EventBus("run-2")
    for sink in report_sinks(str(tmp_path / "j.xml"), str(tmp_path / "s.md"), str(step_summary)):
        bus.subscribe(sink)
    bus.emit("run_start", data={"batches": [["h1"]]})
    assert not (tmp_path / "j.xml").exists()
    _run(bus)
    assert (tmp_path / "j.xml").exists()
    assert step_summary.read_text() == "earlier step\n" + (tmp_path / "s.md").read_text()


def test_prom_metrics_parse_with_hostile_labels(tmp_path: Path) -> None:
    rows = [
        {"host": 'h"1\n\\', "state": "running", "serving": True, "restarts_last_hour": 2,
         "uptime_secs": 5.5, "memory_used": 100, "memory_limit": 1000,
         "last_exit": {"signal": "SIGKILL", "time": 1.7e9}, "last_exit_cause": 'oom "x"',
         "last_exit_how": "SIGKILL"},
        {"host": "h2", "state": "unreachable", "serving": False, "error": "refused"},
    ]
    out = tmp_path / "rollout.prom"
    prom.write(out, rows, 123.0)
    families = {f.name: f for f in text_string_to_metric_families(out.read_text())}
    assert {s.labels["host"]: s.value for s in families["rollout_host_up"].samples} == {
        'h"1\n\\': 1.0, "h2": 0.0}
    (exit_,) = families["rollout_daemon_last_exit_timestamp_seconds"].samples
    assert exit_.labels == {"host": 'h"1\n\\', "cause": 'oom "x"', "how": "SIGKILL"}
    assert families["rollout_memory_limit_bytes"].samples[0].value == 1000
    state = [s for s in families["rollout_daemon_state"].samples if s.value == 1]
    assert [(s.labels["host"], s.labels["state"]) for s in state] == [
        ('h"1\n\\', "running"), ("h2", "unreachable")]
    assert families["rollout_fleet_serving_hosts"].samples[0].value == 1
    assert os.listdir(tmp_path) == ["rollout.prom"]


def test_fold_reads_a_torn_journal(tmp_path: Path) -> None:
    from rollout.reports.runlog import read_journal

    bus = EventBus("run-3")
    _run(bus)
    text = "".join(e.to_json() + "\n" for e in bus.history) + '{"kind": "step_'
    journal = tmp_path / "run-3.jsonl"
    journal.write_text(text)
    record = fold(read_journal(journal))
    assert record.hosts["h1"].status == "rolled_back" and record.status == "failed"
    assert [s.name for s in record.hosts["h1"].steps][-1] == "rollback-validate"
    assert isinstance(bus.history[0], Event)


def test_report_command_renders_a_journal(cli: CliRunner, tmp_path: Path) -> None:
    bus = EventBus("run-4")
    _run(bus)
    runs = tmp_path / "runs"
    runs.mkdir()
    (runs / "run-4.jsonl").write_text("".join(e.to_json() + "\n" for e in bus.history))

    def report(*args: str) -> CliResult:
        return cli("report", *args, env={"ROLLOUT_RUNS_DIR": str(runs)}, cwd=tmp_path)

    out = tmp_path / "out"
    done = report("run-4", "--html", str(out / "r.html"), "--junit", str(out / "j.xml"),
                  "--summary", str(out / "s.md"))
    assert done.returncode == 0, done.stderr
    assert sorted(p.name for p in out.iterdir()) == ["j.xml", "r.html", "s.md"]
    missing = report("run-5", "--html", str(out / "x.html"))
    assert missing.returncode == 2 and "no journal" in missing.stderr
