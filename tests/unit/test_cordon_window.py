"""A cordon that holds (issue 27): curio reads its node's cordon on its database poll, every
30 s, so after `curio cordon` the stop waits work.cordon_takes (counted from the cordon's
report, on the controller's clock) and for every job that appeared meanwhile, then says so
in its result. The decision as a table, the wait on a scripted host, the retired key."""

from __future__ import annotations

import ast
from pathlib import Path
from typing import Any

import pytest
from test_rollback_work import Host, late_stop, stopping
from test_work import RUNNING, Clock, scripted_context, status

from rollout.config.playbook import LAB_PLAYBOOK
from rollout.config.work import WorkSpec
from rollout.host.reports import Job, WorkReport
from rollout.output.events import Status, StepResult
from rollout.steps.kinds import load_playbook
from rollout.steps.kinds.stop import apply
from rollout.steps.work import (
    Verdict,
    WorkHow,
    before_stop,
    cordon_holds,
    with_work,
    work_how,
)

CORDON = {"work.cordon": "curio cordon", "work.uncordon": "curio uncordon",
          "work.cordon_takes": 30, "work.deadline": 600}
IDLE = WorkReport("idle", "", (), 0)
BUSY = WorkReport("busy", "", (Job("porep-c2", "j-1", 4.0),), 0)
GONE = WorkReport("no-answer", "", (), None)


@pytest.mark.parametrize(("decided", "report", "since", "takes", "want"), [
    ("go", IDLE, None, 30, "go"),      # no cordon ran: no window to wait
    ("go", IDLE, 0.0, 30, "wait"),     # idle at once: the cordon may not be read yet
    ("go", IDLE, 29.9, 30, "wait"),
    ("go", IDLE, 30.0, 30, "go"),      # the window passed, idle: the cordon holds
    ("go", IDLE, 0.0, 0, "go"),        # cordon_takes 0: a scheduler that reads it at once
    ("go", GONE, 0.0, 30, "go"),       # no daemon answers: nothing a task could reach
    ("wait", BUSY, 45.0, 30, "wait"),  # a job in flight after the window: waited for
    ("skip", BUSY, 5.0, 30, "skip"),   # the deadline's choice stands
    ("stop", BUSY, 5.0, 30, "stop"),
])
def test_the_cordons_window_as_a_table(decided: Verdict, report: WorkReport,
                                       since: float | None, takes: float, want: str) -> None:
    how = WorkHow("curio cordon", "curio uncordon", 600, 30, "skip", 60, "", takes)
    assert cordon_holds(decided, report, since, how) == want


def wait(answers: list[dict[str, Any]], **settings: Any) -> tuple[Any, Clock, list[Any], Any]:
    """before_stop on a scripted host (its cordon gives no look of its own)."""
    ctx, host, events = scripted_context(answers, **settings)
    clock = Clock()
    done = before_stop(ctx, work_how(ctx.target, "http://x/status"), clock, clock.sleep)
    return done, clock, events, host


def stop_result(done: Any) -> StepResult:
    return with_work(StepResult(Status.CHANGED, "stopped daemon 4242", {}), done)


def test_an_idle_host_waits_the_window_at_most_and_the_stop_says_so() -> None:
    done, clock, events, host = wait([], **CORDON)
    assert done.verdict == "go" and clock.now == pytest.approx(30)
    looks = sum(1 for call, _ in host.calls if call == "ops.work")
    assert looks == 6  # idle: one every IDLE_POLL (5 s); at its end, the stop's own look
    said = "cordon in effect: waited 30.0s (work.cordon_takes 30s), no new job since"
    assert events[-1]["reason"] == said
    result = stop_result(done)
    assert result.reason == f"stopped daemon 4242; {said}"
    assert result.data["cordon"] == {"takes": 30, "new_since": []}


def test_at_the_windows_end_the_stops_own_look_is_the_last_one() -> None:
    """An idle host: the wait looks every IDLE_POLL and ends at the window's end without a
    look; the stop's look right before its signal is the one there. A job it finds there
    signals nothing: the wait goes on until the job ends, then the stop (issue 27's rule)."""
    late = {**RUNNING, "job_id": "j-late"}
    quiet = Host([], [])
    ctx, _, action = stopping(quiet, **CORDON)
    clock = Clock()
    result = apply(ctx, action, clock, clock.sleep)
    assert [name for name, _ in quiet.calls].count("work") == 6 and clock.now == 30
    [stop] = [kw for name, kw in quiet.calls if name == "stop"]
    assert stop["on_work"] == "wait" and stop["status_url"]
    assert "cordon in effect: waited 30.0s (work.cordon_takes 30s)" in result.reason

    busy = Host([status()] * 6 + [status([late])] * 10, [late_stop(status([late]))])
    ctx, _, action = stopping(busy, **CORDON)
    clock = Clock()
    result = apply(ctx, action, clock, clock.sleep)
    assert [name for name, _ in busy.calls].count("stop") == 2 and clock.now >= 40
    assert "cordon in effect: waited" in result.reason and "j-late" in result.reason


def test_a_job_claimed_in_the_window_is_waited_for_not_killed() -> None:
    late = {**RUNNING, "job_id": "j-late"}
    answers = [status()] * 2 + [status([late])] * 33  # idle at 0 and 5 s; seen at 10 s,
    # then looked at each second (POLL) while it runs; ends at 43 s
    done, clock, _, _ = wait(answers, **CORDON)
    assert done.verdict == "go" and clock.now >= 43
    assert [j.id for j in done.waited_on] == [j.id for j in done.new] == ["j-late"]
    reason = stop_result(done).reason
    assert "cordon in effect: waited 43.0s (work.cordon_takes 30s), 1 new job(s) since, " \
        "waited for: porep-c2 j-late" in reason
    assert "waited 43.0s for 1 job(s) to end: porep-c2 j-late" in reason


def test_a_job_in_flight_at_the_cordon_is_not_new() -> None:
    answers = [status([RUNNING])] * 5
    done, clock, _, _ = wait(answers, **CORDON)
    assert clock.now == pytest.approx(30) and done.new == ()
    assert "no new job since; waited 30.0s for 1 job(s) to end: porep-c2 j-1" \
        in stop_result(done).reason


def test_without_a_cordon_there_is_no_window() -> None:
    done, clock, _, host = wait([], **{"work.cordon_takes": 30})
    assert done.verdict == "go" and clock.now == 0 and done.cordon_takes is None
    assert [call for call, _ in host.calls] == ["ops.work"]
    assert stop_result(done).reason == "stopped daemon 4242"


def test_the_deadline_still_bounds_a_job_claimed_in_the_window() -> None:
    late = {**RUNNING, "job_id": "j-late"}
    done, clock, _, _ = wait([status()] * 2 + [status([late])] * 40,
                             **{**CORDON, "work.deadline": 10, "work.at_deadline": "stop"})
    assert done.verdict == "stop" and [j.id for j in done.in_flight] == ["j-late"]
    assert "abandoning 1 job(s) in flight: porep-c2 j-late" in stop_result(done).reason


def test_the_lab_playbook_waits_the_lab_sidecars_poll() -> None:
    ctx, _, _ = scripted_context([], **{"work.cordon": "curio cordon",
                                        "work.uncordon": "curio uncordon"})
    sidecar = ast.parse((LAB_PLAYBOOK.parent.parent / "dockerfiles/lab-standin/curio")
                        .read_text())
    [defaults] = [ast.literal_eval(node.value) for node in sidecar.body
                  if isinstance(node, ast.Assign) and ast.unparse(node.targets[0]) == "DEFAULTS"]
    assert work_how(ctx.target, "").cordon_takes == defaults["cordon_poll_secs"]
    assert WorkSpec().cordon_takes == 30  # curio's database poll


def test_a_playbook_with_work_settle_loads_with_a_warning_naming_the_fix(tmp_path: Path) -> None:
    path = tmp_path / "old.yaml"
    path.write_text("name: old\nwork:\n  cordon: curio cordon\n  uncordon: curio uncordon\n"
                    "  settle: 0.3\nsteps:\n  - {name: stop, kind: stop}\n")
    playbook = load_playbook(path, builds=False)
    (warning,) = [w for w in playbook.warnings if "work.settle" in w]
    assert warning.startswith(f"{path}:5: work.settle") and "removed and is ignored" in warning
    assert "work.cordon_takes" in warning and "delete the key" in warning
    assert playbook.work.cordon_takes == 30
