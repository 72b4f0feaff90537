"""The rollback's stop and the work in flight (issue 27): a stop at once (the run's
rollback, the guard's takeover, `rollout stop --force`) looks at the work once right before
its signal and names what it abandons, on both sides through the one judge; a stop after
its wait looks once more right before its signal and, where a job arrived since the wait's
last look, signals nothing and goes back to waiting (work.deadline bounds the whole);
`rollout rollback` stops as the stop step does."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from test_guard import NEW, OLD, host_plan
from test_work import RUNNING, Clock, status, work_context

from rollout.engine.guard import rollback_recipe
from rollout.errors import StepFailed
from rollout.host.facts import HostFacts
from rollout.host.scripts import guard, ops
from rollout.host.scripts.judge import verdict
from rollout.steps.decision import Action, Phase
from rollout.steps.kinds import KINDS
from rollout.steps.kinds.stop import StopParams, apply, stop_action
from rollout.transport.base import RunResult

LATE = {**RUNNING, "job_id": "curio-late-1", "started_secs_ago": 0.5}


# ---------------------------------------------------------------- the rollback's stop


def test_a_rollbacks_stop_looks_once_at_the_work_and_the_guards_recipe_carries_it() -> None:
    plan = host_plan("/data", OLD)
    back = plan.rollback_at(Phase.STARTED, "validate")
    stop = back.actions[back.kinds.index("stop")]
    assert [c.name for c in stop.calls] == ["stop"]  # no cordon, no wait: at once
    kwargs = stop.calls[0].kwargs
    assert kwargs["on_work"] == "abandon" and kwargs["status_url"].endswith("/status")
    assert kwargs["bench"][-1] == "status"
    recipe = rollback_recipe(plan)["started"]["calls"]
    assert recipe[0] == {"step": "stop", "calls": [stop.calls[0].as_json()],
                         "tolerate": False}


def test_a_stop_at_once_without_a_status_port_still_looks_through_the_bench() -> None:
    plan = host_plan("/data", OLD)
    settings = plan.target.settings
    quiet = settings.model_copy(update={"daemon": settings.daemon.model_copy(
        update={"status_listen": ""})})
    action = stop_action(plan.facts, plan.target.__class__(
        plan.target.host, plan.target.layout, quiet, plan.target.release),
        StopParams(force=True, work=False))
    assert action.calls[0].kwargs["status_url"] == "" and action.calls[0].kwargs["bench"]


def stop_report(look: Any, cordoned: Any = True, outcome: str = "stopped") -> dict[str, Any]:
    return {"outcome": outcome, "reason": "x", "pid": 77, "signal": "SIGTERM",
            "work": look, "cordoned": cordoned}


ABANDON = {"call": "stop", "kwargs": {"root": "/data", "signal": "SIGTERM",
                                      "on_work": "abandon"}}


def test_the_judge_names_the_jobs_a_stop_at_once_abandons() -> None:
    busy = ops.jobs_in_flight(status([RUNNING], depth=2))
    status_, reason, data = verdict("stop", [ABANDON], [stop_report(busy)])
    assert status_ == "changed"
    assert reason == ("hold set; daemon 77 stopped (SIGTERM); stopped at once, abandoning "
                      "1 job(s) in flight: porep-c2 j-1 (42s); queue 2")
    assert data["abandoned"] == [{"kind": "porep-c2", "id": "j-1", "age": 42.5}]
    _, reason, _ = verdict("stop", [ABANDON], [stop_report(busy, cordoned=False)])
    assert reason.endswith("no cordon held the host (work.cordon): curio may have sent this "
                           "daemon real work")
    unknown = {"outcome": "unknown", "reason": "the daemon runs but answers no signal"}
    status_, reason, _ = verdict("stop", [ABANDON], [stop_report(unknown)])
    assert status_ == "changed" and "its work unknown (the daemon runs but" in reason
    idle = ops.jobs_in_flight(status())
    _, reason, data = verdict("stop", [ABANDON], [stop_report(idle)])
    assert reason == "hold set; daemon 77 stopped (SIGTERM)" and data["abandoned"] == []


def test_an_adopted_daemons_stop_at_once_names_what_it_abandons() -> None:
    busy = ops.jobs_in_flight(status([RUNNING]))
    adopt = {"call": "stop", "kwargs": {**ABANDON["kwargs"], "adopt_pid": 77}}
    report = {**stop_report(busy, cordoned=False), "cmdline": "cuzk-daemon"}
    status_, reason, data = verdict("stop", [adopt], [report])
    assert status_ == "changed" and reason.startswith("hold set; adopted and stopped daemon")
    assert ("stopped at once, abandoning 1 job(s) in flight: porep-c2 j-1 (42s); queue 0"
            in reason) and "curio may have sent this daemon real work" in reason
    assert data["abandoned"] == [{"kind": "porep-c2", "id": "j-1", "age": 42.5}]


@pytest.mark.parametrize("look", [
    None, "busy", [], {"outcome": "busy", "jobs": "j-1"},
    {"outcome": "busy", "jobs": [None, 3, {"id": ["$(reboot)"], "kind": {}, "age": "old"}],
     "queue_depth": "deep"},
    {"outcome": ["unknown"], "reason": 5},
])
def test_a_hostile_look_is_information_never_a_failure(look: Any) -> None:
    status_, reason, data = verdict("stop", [ABANDON], [stop_report(look, cordoned="yes")])
    assert status_ == "changed" and reason.startswith("hold set; daemon 77 stopped")
    assert all(isinstance(j["id"], str) for j in data["abandoned"])


def test_the_guards_event_line_names_what_its_stop_abandoned(tmp_path: Path,
                                                              monkeypatch: pytest.MonkeyPatch
                                                              ) -> None:
    busy = ops.jobs_in_flight(status([RUNNING]))
    made: list[tuple[str, dict[str, Any]]] = []

    def call(name: str, kwargs: dict[str, Any]) -> dict[str, Any]:
        made.append((name, kwargs))
        return stop_report(busy, cordoned=False)

    fake = SimpleNamespace(call=call, current_release=lambda root: NEW)
    monkeypatch.setattr(guard, "not_ours", lambda root, run: None)
    recipe = {"run_id": "run-1", "host": "h", "root": str(tmp_path), "release": NEW,
              "previous": None, "rollback": rollback_recipe(host_plan(str(tmp_path), None))}
    events = guard.Events(str(tmp_path / "guard.jsonl"), recipe, "1")
    assert guard.take_over(guard.Host(recipe, fake), events, {"phase": "started",
                                                             "armed": True}) == "held"
    assert made[0][0] == "stop" and made[0][1]["on_work"] == "abandon"
    lines = [json.loads(x) for x in (tmp_path / "guard.jsonl").read_text().splitlines()]
    [stop] = [e for e in lines if e["kind"] == "step_end"]
    assert stop["status"] == "changed"
    assert "abandoning 1 job(s) in flight: porep-c2 j-1 (42s)" in stop["reason"]
    assert "curio may have sent this daemon real work" in stop["reason"]
    assert stop["data"]["abandoned"] == [{"kind": "porep-c2", "id": "j-1", "age": 42.5}]


# ---------------------------------------------------------------- ops.stop's look, for real


class StatusServer:
    """cuzk's /status on loopback, answering `doc`."""

    def __init__(self) -> None:
        self.doc: Any = status()
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 - http.server's name
                body = json.dumps(outer.doc).encode()
                self.send_response(200)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: Any) -> None:
                return

        self.server = HTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_port}/status"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()


@pytest.fixture
def cuzk() -> Iterator[StatusServer]:
    server = StatusServer()
    yield server
    server.server.shutdown()


def test_the_stop_action_signals_nothing_where_work_arrived(tmp_path: Path,
                                                            cuzk: StatusServer) -> None:
    root, hold = str(tmp_path), tmp_path / "rollout" / "hold"
    cuzk.doc = status([LATE])
    out = ops.call("stop", {"root": root, "status_url": cuzk.url, "on_work": "wait",
                            "proc": str(tmp_path)})
    assert out["outcome"] == "busy" and "work arrived" in out["reason"]
    assert [j["id"] for j in out["work"]["jobs"]] == ["curio-late-1"]
    assert not hold.exists()  # nothing changed: a host skipped later is left as it was
    known = ops.call("stop", {"root": root, "status_url": cuzk.url, "on_work": "wait",
                              "known": ["curio-late-1"], "proc": str(tmp_path)})
    assert known["outcome"] == "none" and hold.exists()  # a stuck job the wait let go
    hold.unlink()
    at_once = ops.call("stop", {"root": root, "status_url": cuzk.url, "on_work": "abandon",
                                "proc": str(tmp_path)})
    assert at_once["outcome"] == "none" and at_once["work"]["outcome"] == "busy"
    assert at_once["cordoned"] is False and hold.exists()
    hold.unlink()
    cuzk.doc = status()
    idle = ops.call("stop", {"root": root, "status_url": cuzk.url, "on_work": "wait",
                             "proc": str(tmp_path)})
    assert idle["outcome"] == "none" and idle["work"]["outcome"] == "idle"
    plain = ops.call("stop", {"root": root, "proc": str(tmp_path)})
    assert "work" not in plain  # no look asked: none taken


# ---------------------------------------------------------------- the controller's stop


class Host:
    """A host whose ops.work answers from `looks` (then idle) and whose ops.stop answers
    from `stops` (then stopped), each as the host would; the cordon and uncordon succeed."""

    def __init__(self, looks: list[Any], stops: list[Any]) -> None:
        self.looks, self.stops = looks, stops
        self.calls: list[tuple[str, dict[str, Any]]] = []

    def call(self, source: str, call: str, kwargs: Any, timeout: float | None = None
             ) -> RunResult:
        name = call.removeprefix("ops.")
        self.calls.append((name, dict(kwargs)))
        if name == "work":
            report = ops.jobs_in_flight(self.looks.pop(0) if self.looks else status())
        elif name == "stop":
            report = self.stops.pop(0) if self.stops else {
                "outcome": "stopped", "reason": "stopped", "pid": 77, "signal": "SIGTERM"}
        else:
            report = {"outcome": {"cordon": "cordoned", "uncordon": "uncordoned"}.get(
                name, name), "reason": "ok", "exit": 0, "output": ""}
        return RunResult(call, 0, json.dumps(report) + "\n", "")


def late_stop(doc: Any) -> dict[str, Any]:
    return {"outcome": "busy", "reason": "nothing signalled", "cordoned": True,
            "work": ops.jobs_in_flight(doc)}


def stopping(host: Host, **settings: Any) -> tuple[Any, list[dict[str, Any]], Action]:
    ctx, events = work_context(host, **{"work.interval": 1, **settings})
    ctx.state.phase = Phase.STOPPED
    facts = HostFacts.parse({"daemon": {"state": "running", "pid": 4242, "starttime": 1}})
    assert facts.daemon.running
    return ctx, events, KINDS["stop"].decide(facts, ctx.target, StopParams(force=True))


def test_a_job_that_arrives_before_the_signal_sends_the_stop_back_to_waiting() -> None:
    host = Host([status()] + [status([LATE])] * 3, [late_stop(status([LATE]))])
    ctx, events, action = stopping(host)
    clock = Clock()
    result = apply(ctx, action, clock, clock.sleep)
    stops = [kw for name, kw in host.calls if name == "stop"]
    assert len(stops) == 2 and all(kw["on_work"] == "wait" and kw["known"] == []
                                   for kw in stops)
    assert result.status.value == "changed"
    assert ("work arrived after the wait's last look, before the signal, waited for: "
            "porep-c2 curio-late-1") in result.reason
    assert [j["id"] for j in result.data["late"]] == ["curio-late-1"]
    said = [e["reason"] for e in events if e["kind"] == "work"]
    assert any(r.startswith("work arrived after the wait's last look") for r in said)


def test_a_late_job_still_running_at_the_deadline_skips_the_host_untouched() -> None:
    host = Host([status()] + [status([LATE])] * 500, [late_stop(status([LATE]))])
    ctx, _, action = stopping(host, **{"work.deadline": 5, "work.at_deadline": "skip"})
    clock = Clock()
    with pytest.raises(StepFailed) as failed:
        apply(ctx, action, clock, clock.sleep)
    assert failed.value.data["busy"] is True and "curio-late-1" in str(failed.value)
    assert 5 <= clock.now < 7  # the deadline bounds both waits together
    assert [name for name, _ in host.calls].count("stop") == 1  # never signalled
    assert ctx.state.phase is Phase.UNTOUCHED


def test_at_the_deadline_with_stop_the_stop_takes_no_look() -> None:
    host = Host([status([RUNNING])] * 500, [])
    ctx, _, action = stopping(host, **{"work.deadline": 3, "work.at_deadline": "stop"})
    clock = Clock()
    result = apply(ctx, action, clock, clock.sleep)
    [stop] = [kw for name, kw in host.calls if name == "stop"]
    assert "on_work" not in stop and "status_url" not in stop
    assert "abandoning 1 job(s) in flight: porep-c2 j-1" in result.reason


def test_the_controllers_rollback_names_what_its_stop_abandoned() -> None:
    busy = ops.jobs_in_flight(status([RUNNING]))
    host = Host([], [stop_report(busy, cordoned=True)])
    ctx, _, _ = stopping(host)
    undo = KINDS["stop"].undo
    assert undo is not None
    result = apply(ctx, undo(ctx.target, HostFacts(), StopParams(), None))
    assert [name for name, _ in host.calls] == ["stop"]  # no cordon, no wait
    assert "abandoning 1 job(s) in flight: porep-c2 j-1 (42s)" in result.reason
    assert "no cordon held" not in result.reason
    assert result.data["abandoned"] == [{"kind": "porep-c2", "id": "j-1", "age": 42.5}]


def test_a_busy_reply_to_a_stop_at_once_is_a_typed_failure_never_a_result() -> None:
    host = Host([], [late_stop(status([RUNNING]))])
    ctx, _, _ = stopping(host)
    undo = KINDS["stop"].undo
    assert undo is not None
    with pytest.raises(StepFailed, match="answered a stop at once as busy, nothing "
                                         "stopped: porep-c2 j-1"):
        apply(ctx, undo(ctx.target, HostFacts(), StopParams(), None))


def test_the_rollback_command_and_the_single_stops_wait_as_the_stop_step() -> None:
    from rollout.commands.rollback import ROLLBACK_STEPS

    assert "stop" in ROLLBACK_STEPS and "work" not in KINDS["stop"].rollback_params
    assert StopParams().work is True  # `rollout stop`, `rollout drain`; --force: False
