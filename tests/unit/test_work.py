"""Work in flight before a stop (issue 17): the jobs read from cuzk's /status (hostile
documents included), the wait's decisions, the wait itself on a scripted host, the cordon
and uncordon host actions run for real on a temporary root, and the settings' load."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from contexts import host_context, small_host

from rollout.config.playbook import LAB_PLAYBOOK, parse_set_options
from rollout.errors import ConfigError, StepFailed
from rollout.host.reports import Job, WorkReport
from rollout.host.scripts import ops
from rollout.steps.base import HostContext
from rollout.steps.decision import Phase
from rollout.steps.kinds import load_playbook
from rollout.steps.work import (
    WorkHow,
    before_stop,
    due,
    uncordon_at_end,
    verdict,
    wait_for_work,
    work_how,
)
from rollout.transport.base import RunResult

RUNNING = {"job_id": "j-1", "proof_kind": "porep-c2", "started_secs_ago": 42.5,
           "total_partitions": 10, "partitions_done": 3,
           "partitions": [{"index": 0, "state": "done"}]}
DONE = {**RUNNING, "job_id": "j-0", "partitions_done": 10}
FAILED = {**RUNNING, "job_id": "j-f", "partitions": [{"index": 0, "state": "failed"}]}
IDLE_WORKER = {"worker_id": 0, "current_job": None}


def status(pipelines: Any = (), workers: Any = (IDLE_WORKER,), depth: Any = 0) -> dict[str, Any]:
    return {"pipelines": list(pipelines), "gpu_workers": list(workers),
            "counters": {"queue_depth": depth}}


def test_a_pipeline_in_flight_is_named_with_its_kind_id_and_age() -> None:
    out = ops.jobs_in_flight(status([RUNNING, DONE, FAILED]))
    assert out["outcome"] == "busy"
    assert out["jobs"] == [{"id": "j-1", "kind": "porep-c2", "age": 42.5, "steps": 4,
                            "seen": "status"}]


def test_pipelines_cuzk_keeps_after_their_end_and_an_empty_queue_are_idle() -> None:
    assert ops.jobs_in_flight(status([DONE, FAILED]))["outcome"] == "idle"
    assert ops.jobs_in_flight(status())["outcome"] == "idle"


def test_a_gpu_workers_current_job_and_a_queue_are_work_too() -> None:
    worker = {"worker_id": 1, "current_job": "j-9", "busy_secs": 3}
    out = ops.jobs_in_flight(status(workers=[worker]))
    assert out["outcome"] == "busy" and out["jobs"] == [
        {"id": "j-9", "kind": "?", "age": 3.0, "steps": None, "seen": "status"}]
    queued = ops.jobs_in_flight(status(depth=2))
    assert queued["outcome"] == "busy" and queued["jobs"] == [] and queued["queue_depth"] == 2


@pytest.mark.parametrize("doc", [
    None, [], "busy", 7, {"pipelines": "x", "gpu_workers": {}, "counters": []},
    {"counters": {"queue_depth": True}}, {"uptime_secs": 3},
])
def test_a_status_that_is_not_cuzks_shape_is_unknown(doc: Any) -> None:
    out = ops.jobs_in_flight(doc)
    assert out["outcome"] == "unknown" and out["jobs"] == []


def test_hostile_fields_are_read_by_their_type_never_trusted() -> None:
    hostile = [
        {"job_id": {"$(reboot)": 1}, "proof_kind": ["x"], "started_secs_ago": "1e9",
         "total_partitions": "10", "partitions_done": None, "partitions": "failed"},
        {"job_id": True, "started_secs_ago": -5, "partitions": [None, 3, {"state": 1}]},
        {"job_id": "x" * 5000, "started_secs_ago": float("inf")},
        "not a pipeline", None,
    ]
    # no job_id at all: still a pipeline in flight, its id unknown
    alone = ops.jobs_in_flight(status([{"partitions": [{"state": "gpu"}]}]))
    assert alone["outcome"] == "busy" and [j["id"] for j in alone["jobs"]] == ["?"]
    workers = [None, "w", {"current_job": {"a": 1}, "busy_secs": "long"}]
    out = ops.jobs_in_flight({"pipelines": hostile + [RUNNING] * 3, "gpu_workers": workers,
                              "counters": {"queue_depth": -3}})
    assert out["outcome"] == "busy" and out["queue_depth"] is None
    ids = [j["id"] for j in out["jobs"]]
    assert "?" in ids and "j-1" in ids and all(len(i) <= 128 for i in ids)
    assert all(j["age"] is None or j["age"] >= 0 for j in out["jobs"])
    report = WorkReport.parse(json.loads(json.dumps(out, default=str)))
    assert report.outcome == "busy" and report.jobs and not report.idle
    many = ops.jobs_in_flight(status([{**RUNNING, "job_id": f"j{i}"} for i in range(500)]))
    assert len(many["jobs"]) == 50


@pytest.mark.parametrize("doc", [
    None, [], "idle", {"outcome": 3, "jobs": "j-1"},
    {"outcome": "busy", "jobs": [None, "j", {"id": 5, "kind": None, "age": "old"}],
     "queue_depth": "deep"},
])
def test_the_controller_parses_the_work_report_as_hostile_data(doc: Any) -> None:
    report = WorkReport.parse(doc)
    assert isinstance(report.outcome, str)
    assert all(isinstance(j.id, str) and isinstance(j.kind, str) for j in report.jobs)
    assert report.queue_depth is None or report.queue_depth >= 0


HOW = WorkHow("", "", deadline=60, interval=10, at_deadline="skip", timeout=5, status_url="",
              cordon_takes=1)
BUSY = WorkReport("busy", "", (Job("porep-c2", "j-1", 4.0),), 0)


@pytest.mark.parametrize(("report", "waited", "at", "want"), [
    (WorkReport("idle", "", (), 0), 0, "skip", "go"),
    (WorkReport("no-answer", "", (), None), 0, "skip", "go"),
    (WorkReport("unknown", "", (), None), 0, "skip", "wait"),  # issue 27: never idle
    (WorkReport("unknown", "", (), None), 60, "skip", "skip"),
    (WorkReport("bad-call", "", (), None), 0, "stop", "wait"),
    (BUSY, 59.9, "skip", "wait"),
    (WorkReport("busy", "", (), 3), 10, "skip", "wait"),
    (BUSY, 60, "skip", "skip"),
    (BUSY, 61, "stop", "stop"),
])
def test_the_waits_decisions(report: WorkReport, waited: float, at: str, want: str) -> None:
    how = WorkHow("", "", 60, 10, at, 5, "", 1)  # type: ignore[arg-type]
    assert verdict(report, waited, how) == want


def test_the_jobs_are_reported_at_the_first_look_then_each_interval() -> None:
    assert due(0, None, 10) and not due(9.9, 0, 10) and due(10, 0, 10)


class Scripted:
    """A host whose ops.work answers from a list (then idle); every other call succeeds."""

    def __init__(self, answers: list[dict[str, Any]]) -> None:
        self.answers = answers
        self.calls: list[tuple[str, dict[str, Any]]] = []

    def call(self, source: str, call: str, kwargs: Any, timeout: float | None = None
             ) -> RunResult:
        self.calls.append((call, dict(kwargs)))
        if call == "ops.work":
            report = self.answers.pop(0) if self.answers else status()
            report = ops.jobs_in_flight(report)
        else:
            report = {"outcome": call.removeprefix("ops.") + "ed", "reason": "ok"}
        return RunResult(call, 0, json.dumps(report) + "\n", "")


def scripted_context(answers: list[dict[str, Any]], **settings: Any
                     ) -> tuple[HostContext, Scripted, list[dict[str, Any]]]:
    """The lab playbook's settings on a scripted host, without the lab's curio cordon
    unless `settings` set one (work.cordon, work.uncordon)."""
    transport = Scripted(answers)
    ctx, events = work_context(transport, **settings)
    return ctx, transport, events


def work_context(transport: Any, **settings: Any) -> tuple[HostContext, list[dict[str, Any]]]:
    """A host context on `transport` with the lab playbook's settings (no cordon unless
    `settings` set one), and the events it emits (host calls left out)."""
    settings = {"work.cordon": None, "work.uncordon": None, **settings}
    events: list[dict[str, Any]] = []
    host = small_host()
    ctx = host_context(host, transport,
                       emit=lambda kind, **f: kind == "host_call" or events.append(
                           {"kind": kind, **f}))
    ctx.settings = load_playbook(LAB_PLAYBOOK, overrides=parse_set_options(
        ("params_files=[]", "pce_bytes=0")), settings=settings).for_host(host)
    return ctx, events


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds


def test_the_wait_names_the_jobs_at_intervals_and_in_its_result() -> None:
    busy = [status([{**RUNNING, "started_secs_ago": 40 + i}]) for i in range(25)]
    ctx, host, events = scripted_context(busy, **{"work.interval": 10})
    clock = Clock()
    done = wait_for_work(ctx, work_how(ctx.target, "http://x/status"), clock, clock.sleep)
    assert done.verdict == "go" and [j.id for j in done.waited_on] == ["j-1"]
    waits = [e for e in events if e["reason"].startswith("waiting for work")]
    assert len(waits) == 3  # at 0 s, 10 s and 20 s of 25 s
    assert all("porep-c2 j-1" in e["reason"] for e in waits)
    assert "waited 25.0s for 1 job(s) to end: porep-c2 j-1" in events[-1]["reason"]


@pytest.mark.parametrize("at", ["skip", "stop"])
def test_at_the_deadline_the_host_is_skipped_or_the_jobs_abandoned_are_named(at: str) -> None:
    forever = [status([RUNNING])] * 100
    ctx, host, events = scripted_context(forever, **{
        "work.deadline": 5, "work.at_deadline": at,
        "work.cordon": "curio cordon", "work.uncordon": "curio uncordon"})
    ctx.state.phase = Phase.STOPPED
    how = work_how(ctx.target, "http://x/status")
    clock = Clock()
    if at == "skip":
        with pytest.raises(StepFailed) as e:
            before_stop(ctx, how, clock, clock.sleep)
        assert e.value.data["busy"] is True and "j-1" in str(e.value)
        assert ctx.state.phase is Phase.UNTOUCHED  # nothing that serves changed
    else:
        done = before_stop(ctx, how, clock, clock.sleep)
        assert done.verdict == "stop" and done.data()["abandoned"] == [
            {"kind": "porep-c2", "id": "j-1", "age": 42.5}]
        assert "abandoning 1 job(s) in flight: porep-c2 j-1" in events[-1]["reason"]
    assert clock.now >= 5  # the whole deadline waited (on the test's clock)
    assert ctx.state.cordoned and host.calls[0][0] == "ops.cordon"
    uncordon_at_end(ctx)
    assert host.calls[-1] == ("ops.uncordon", {"root": ctx.layout.root,
                                               "command": "curio uncordon", "timeout": 60.0})
    assert not ctx.state.cordoned


def test_a_hostile_value_reaches_the_cordon_command_as_one_quoted_word() -> None:
    ctx, _, _ = scripted_context([])
    ctx.settings = load_playbook(LAB_PLAYBOOK, overrides=parse_set_options(
        ("params_files=[]", "pce_bytes=0", "node=x; touch /tmp/h10-pwned $(id)")),
        settings={"work.cordon": ["curio", "cordon", "--node", "{{ node }}"],  # issue 28
                  "work.uncordon": "curio uncordon"})
    how = work_how(ctx.target, "")
    assert how.cordon == "curio cordon --node 'x; touch /tmp/h10-pwned $(id)'"


def test_a_cordon_without_its_uncordon_is_refused_at_load() -> None:
    with pytest.raises(ConfigError, match="uncordon"):
        load_playbook(LAB_PLAYBOOK, overrides=parse_set_options(("params_files=[]",)),
                      settings={"work.cordon": "curio cordon", "work.uncordon": None})


def test_cordon_records_the_run_first_and_uncordon_removes_it(tmp_path: Path) -> None:
    root = tmp_path / "data"
    marks = tmp_path / "marks"
    out = ops.cordon(str(root), "run-1", f"echo cordoned >> {marks}")
    assert out["outcome"] == "cordoned" and marks.read_text() == "cordoned\n"
    assert ops.cordoned(str(root))["run"] == "run-1"
    failed = ops.uncordon(str(root), "exit 3")
    assert failed["outcome"] == "failed" and ops.cordoned(str(root))["outcome"] == "cordoned"
    done = ops.uncordon(str(root), f"echo uncordoned >> {marks}")
    assert done["outcome"] == "uncordoned" and ops.cordoned(str(root))["outcome"] == "none"
    again = ops.uncordon(str(root), f"echo again >> {marks}")  # no record: nothing run
    assert again["outcome"] == "none" and "again" not in marks.read_text()


def test_a_hostile_record_is_read_as_data(tmp_path: Path) -> None:
    state = tmp_path / "rollout"
    state.mkdir()
    for text, want in (("not json", "?"), ('{"run": ["$(reboot)"]}', "?"),
                       ('{"run": "' + "r" * 400 + '"}', "r" * 128)):
        (state / "cordoned.json").write_text(text)
        assert ops.cordoned(str(tmp_path))["run"] == want
    (state / "cordoned.json").write_text("[1]")
    assert ops.cordoned(str(tmp_path))["outcome"] == "none"


def test_a_user_command_that_runs_past_its_timeout_is_said(tmp_path: Path) -> None:
    out = ops.user_command("sleep 5", timeout=0.2)
    assert out["outcome"] == "timeout"
    assert ops.user_command("  ")["outcome"] == "no-command"


def test_the_cordons_call_brings_the_first_look_back(tmp_path: Path) -> None:
    """ops.cordon looks at /status right after the command (a silent port: no-answer); the
    wait takes that look as its first, so a window no longer than IDLE_POLL needs no
    ops.work at all (an idle host: its end is the stop's own look, before its signal)."""
    out = ops.cordon(str(tmp_path), "run-1", "true", status_url="http://127.0.0.1:9/status",
                     proc=str(tmp_path))  # no daemon process there either
    assert out["outcome"] == "cordoned" and out["work"]["outcome"] == "no-answer"
    assert "work" not in ops.cordon(str(tmp_path), "run-1", "true")  # no URL: no look
    assert "work" not in ops.cordon(str(tmp_path), "run-1", "exit 2", status_url="http://x")

    class Cordoning(Scripted):
        def call(self, source: str, call: str, kwargs: Any, timeout: float | None = None
                 ) -> RunResult:
            if call != "ops.cordon":
                return super().call(source, call, kwargs, timeout)
            self.calls.append((call, dict(kwargs)))
            look = ops.jobs_in_flight(self.answers.pop(0))
            return RunResult(call, 0, json.dumps({"outcome": "cordoned", "work": look}), "")

    for takes, looks in ((0, 0), (0.3, 0)):
        ctx, _, _ = scripted_context([], **{"work.cordon": "curio cordon",
                                            "work.cordon_takes": takes,
                                            "work.uncordon": "curio uncordon"})
        host = Cordoning([status(), status()])
        ctx.transport = host  # type: ignore[assignment]
        clock = Clock()
        done = before_stop(ctx, work_how(ctx.target, "http://x/status"), clock, clock.sleep)
        assert done.verdict == "go" and clock.now >= takes
        assert host.calls[0][1]["status_url"] == "http://x/status"
        assert sum(1 for call, _ in host.calls if call == "ops.work") == looks
    busy = Cordoning([status([RUNNING])])
    ctx, _, _ = scripted_context([], **{"work.cordon": "curio cordon",
                                        "work.uncordon": "curio uncordon"})
    ctx.transport = busy  # type: ignore[assignment]
    clock = Clock()
    done = before_stop(ctx, work_how(ctx.target, "http://x/status"), clock, clock.sleep)
    assert [j.id for j in done.waited_on] == ["j-1"]  # the cordon's look counts


def test_a_busy_skip_is_a_skipped_host_not_a_failure() -> None:
    from rollout.engine.failures import after_failure
    from rollout.engine.hostplan import rollback_plan
    from rollout.engine.outcome import HostOutcome, RunSummary
    from rollout.output.events import EventBus, Status, StepResult

    ctx, _, _ = scripted_context([])
    ctx.state.phase = Phase.UNTOUCHED
    result = StepResult(Status.FAILED, "busy: 1 job(s) still in flight", {"busy": True})
    plan = rollback_plan(Phase.UNTOUCHED, "stop", "r-old", "r-new")
    outcome = after_failure(EventBus("run"), ctx, "stop", result, plan, {}, None)  # type: ignore[arg-type]
    assert (outcome.status, outcome.busy) == ("skipped", True)
    assert outcome.reason.startswith("skipped: busy")
    summary = RunSummary("run", {"h1": outcome, "h2": HostOutcome("h2", "validated", "")})
    assert summary.exit_code == 1  # not validated on the new release: said, not hidden


def test_the_guards_recipe_uncordons_and_the_guard_runs_it(tmp_path: Path) -> None:
    from rollout.engine.guard import uncordon_call
    from rollout.host.scripts import guard as guard_script

    ctx, _, _ = scripted_context([])
    assert uncordon_call(ctx) is None  # no cordon: nothing to undo
    ctx, _, _ = scripted_context([], **{"work.cordon": "curio cordon",
                                        "work.uncordon": "curio uncordon"})
    call = uncordon_call(ctx)
    assert call == {"call": "uncordon", "kwargs": {"root": ctx.layout.root,
                                                   "command": "curio uncordon",
                                                   "timeout": 60.0}}
    root, marks = tmp_path / "data", tmp_path / "marks"
    ops.cordon(str(root), "run-1", "true")
    recipe = {"run_id": "run-1", "host": "h1", "root": str(root),
              "uncordon": {"call": "uncordon", "kwargs": {
                  "root": str(root), "command": f"echo done >> {marks}", "timeout": 5}}}
    events = guard_script.Events(str(tmp_path / "guard.jsonl"), recipe, "1")
    guard_script.uncordon_after(guard_script.Host(recipe, ops), events)
    assert marks.read_text() == "done\n" and ops.cordoned(str(root))["outcome"] == "none"
    [line] = (tmp_path / "guard.jsonl").read_text().splitlines()
    assert json.loads(line)["step"] == "guard-uncordon"
    assert json.loads(line)["status"] == "changed"


def test_the_program_word_of_a_work_command_is_code_an_inventory_var_may_not_set() -> None:
    from rollout.config.hostvar_checks import code_fields

    raw = {"work": {"cordon": "{{ prog }} cordon --node {{ node }}",
                    "uncordon": ["{{ other }}", "uncordon"]}}
    found = sorted(code_fields(raw))
    assert found == [("{{ other }}", ("work", "uncordon")), ("{{ prog }}", ("work", "cordon"))]
    assert list(code_fields({"work": "not a mapping"})) == []


@pytest.mark.parametrize(("raw", "state"), [
    ("run-7", "running (cordoned by run run-7)"), (None, "running"), (["x"], "running"),
    ("r" * 500, f"running (cordoned by run {'r' * 128})"),
])
def test_status_shows_a_host_rollout_left_cordoned(raw: Any, state: str) -> None:
    from rollout.commands import status as health
    from rollout.host.facts import HostFacts

    cordoned = HostFacts.parse({"cordoned": raw}).cordoned
    row = {"host": "h", "state": "running", "cordoned_by": cordoned}
    assert health.table_row(row, 0.0)["state"] == state
