"""--resume reads the journal as hostile input (issue 18): an ill-typed or missing field of
run_start's request is exit 2 naming the journal's file, line and key, never exit 70; a line
that is not an event (cut, garbage, nested past the parser's depth, oversized) is skipped
with a warning."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from conftest import CliRunner

from rollout.commands import app
from rollout.engine.outcome import HostOutcome
from rollout.errors import UserError
from rollout.output.resume import MAX_LINE, journal_events, read_resumed

STEPS = ("preflight", "supervise", "upload", "stop", "drain", "config", "switch", "start",
         "ready", "validate", "prune")
REQUEST = {"hosts": "/f.yaml", "playbook": None, "sets": ["a=1"], "limit": None,
           "release": None, "adopt": False}


def journal(tmp_path: Path, request: Any, *extra: str) -> Path:
    lines = [json.dumps({"kind": "note", "reason": "first"}),
             json.dumps({"kind": "run_start", "data": {"request": request}}),
             *extra,
             json.dumps({"kind": "host_end", "host": "h1", "status": "validated"}),
             json.dumps({"kind": "host_end", "host": ["h2"], "status": "validated"})]
    path = tmp_path / "r1.jsonl"
    path.write_text("\n".join(lines) + "\n")
    return path


def test_a_good_request_and_the_validated_hosts(tmp_path: Path) -> None:
    got = read_resumed(journal(tmp_path, REQUEST, "[" * 100_000, "x" * (MAX_LINE + 1)))
    assert got.request == REQUEST and got.validated == frozenset({"h1"})
    assert len(got.warnings) == 2 and all(":3:" in w or ":4:" in w for w in got.warnings)


@pytest.mark.parametrize(("field", "value"), [
    ("hosts", 7), ("sets", "a=1"), ("sets", [1]), ("limit", ["x"]), ("adopt", "yes"),
    ("playbook", {"x": 1}), ("release", 3.5),
])
def test_an_ill_typed_field_is_exit_2_at_its_line(tmp_path: Path, field: str, value: Any) -> None:
    path = journal(tmp_path, {**REQUEST, field: value})
    with pytest.raises(UserError) as e:
        read_resumed(path)
    assert e.value.exit_code == 2
    assert f"{path}:2: data.request.{field}" in str(e.value)


@pytest.mark.parametrize("request_", [None, {}, [], "x", {"sets": []}])
def test_a_run_start_without_its_request_is_exit_2(tmp_path: Path, request_: Any) -> None:
    with pytest.raises(UserError, match=r"r1\.jsonl:2: data\.request"):
        read_resumed(journal(tmp_path, request_))


def test_resume_request_says_where(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ROLLOUT_RUNS_DIR", str(tmp_path))
    journal(tmp_path, {**REQUEST, "sets": 5})
    with pytest.raises(UserError, match=r"r1\.jsonl:2: data\.request\.sets"):
        app.resume_request(app.RolloutRequest("/f.yaml", resume="r1"))
    journal(tmp_path, {k: v for k, v in REQUEST.items() if k not in ("release", "adopt")})
    resumed, done = app.resume_request(app.RolloutRequest("/f.yaml", resume="r1"))
    assert (resumed.sets, resumed.release, resumed.adopt, done) == (("a=1",), None, False,
                                                                     frozenset({"h1"}))


@pytest.mark.parametrize(("line", "key"), [
    ({"kind": "note", "time": "noon"}, "time"),
    ({"kind": "note", "time": 1.0, "data": ["x"]}, "data"),
    ({"kind": "host_end", "time": 1.0, "host": 7}, "host"),
    ({"kind": "step_end", "time": 1.0, "data": {"attempts": "2"}}, "data.attempts"),
    ({"kind": "run_end", "time": 1.0, "reason": {"a": 1}}, "reason"),
])
def test_rollout_report_refuses_an_ill_typed_event_at_its_line(
    tmp_path: Path, line: dict[str, Any], key: str
) -> None:
    from rollout.reports.runlog import fold, read_journal

    path = tmp_path / "r2.jsonl"
    path.write_text(json.dumps({"kind": "run_start", "time": 1.0, "run_id": "r2", "data": {}})
                    + "\n" + json.dumps(line) + "\n")
    with pytest.raises(UserError) as e:
        fold(read_journal(path))
    assert e.value.exit_code == 2 and f"{path}:2: {key}" in str(e.value)


def test_the_report_command_exits_2_not_70(cli: CliRunner, tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    runs.mkdir()
    (runs / "r3.jsonl").write_text('{"kind": "run_start", "time": "x"}\n')
    p = cli("report", "r3", "--summary", str(tmp_path / "s.md"),
            env={"ROLLOUT_RUNS_DIR": str(runs)}, cwd=tmp_path)  # fmt: skip
    assert p.returncode == 2, p.stderr
    assert "r3.jsonl:1: time" in p.stderr


def test_the_run_end_of_five_thousand_hosts_is_read_back_whole(tmp_path: Path) -> None:
    """Issue 30: run_end names every host's outcome in one line; at 5,000 hosts (the
    simulated bench's largest fleet) a resume and a report still read it."""
    outcomes = {f"gpu-{n:05d}": HostOutcome(f"gpu-{n:05d}", "validated",
                                            "running release 0123456789ab, validation passed",
                                            "0123456789ab", {k: "ok" for k in STEPS}).__dict__
                for n in range(5000)}
    end = json.dumps({"kind": "run_end", "status": "ok", "reason": None, "data": outcomes})
    assert len(end) > 1 << 20
    path = tmp_path / "r1.jsonl"
    path.write_text(json.dumps({"kind": "run_start", "data": {"request": REQUEST}}) + "\n"
                    + end + "\n")
    events, warnings = journal_events(path)
    assert warnings == [] and len(events[1]["data"]) == 5000
