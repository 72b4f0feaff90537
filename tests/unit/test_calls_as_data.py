"""A step's host calls are data (issue 26): the controller's rollback runs the calls of its
rollback actions, the guard's recipe carries the same calls serialised, and the dry run
prints them."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from contexts import settings_for, small_host
from test_engine import NEW, OLD, Fleet, _plan_of

from rollout.commands.dryrun import call_line, describe
from rollout.engine.guard import rollback_recipe
from rollout.engine.hostplan import LOST, HostPlan, PlannedStep
from rollout.host.facts import HostFacts
from rollout.host.layout import Layout
from rollout.steps.decision import Action, Call, Phase, Release, Target
from rollout.steps.kinds import UNDONE
from rollout.steps.kinds.stop import StopParams, stop_action


def plan_on(previous: str | None) -> HostPlan:
    target = Target(small_host(), Layout("/data"), settings_for(small_host()),
                    Release(NEW, "", "", ()))
    return HostPlan(HostFacts(), target, previous, ())


@pytest.mark.parametrize("phase", list(Phase))
@pytest.mark.parametrize("previous", [OLD, None])
def test_the_guard_recipe_is_the_controllers_rollback_actions_serialised(
    phase: Phase, previous: str | None
) -> None:
    plan = plan_on(previous)
    recipe = rollback_recipe(plan)[phase.label]
    back = plan.rollback_at(phase, LOST)
    assert recipe["steps"] == list(back.kinds)
    assert [e["step"] for e in recipe["calls"]] == list(back.kinds)
    for entry, action in zip(recipe["calls"], back.actions, strict=True):
        assert entry["calls"] == [c.as_json() for c in action.calls], entry["step"]
        assert entry["calls"], entry["step"]  # every rollback step is host calls
        assert entry["tolerate"] is (entry["step"] == "drain")
    assert json.loads(json.dumps(recipe)) == recipe  # plain data


@pytest.mark.parametrize("kind", UNDONE)
def test_each_rollback_kind_calls_what_the_guard_needs_to_act_alone(kind: str) -> None:
    plan = plan_on(OLD)
    calls = {e["step"]: e["calls"] for e in rollback_recipe(plan)["started"]["calls"]}[kind]
    assert calls == [c.as_json() for c in plan.rollback_action(kind, OLD).calls]
    kwargs = calls[0]["kwargs"]
    if kind == "stop":
        look = {"status_url": "http://127.0.0.1:9821/status", "on_work": "abandon",
                "bench": ["/data/current/cuzk-bench", "-a", "http://127.0.0.1:9820", "status"]}
        assert calls == [{"call": "stop", "kwargs": {"root": "/data", "signal": "SIGTERM",
                                                       "grace": 10.0, **look}}]
    elif kind == "drain":
        assert set(kwargs["settings"]) >= {"deadline", "plateau", "zombie_grace"}
    elif kind == "switch":
        assert [c["call"] for c in calls] == ["point_current", "restore_config"]
        assert kwargs == {"root": "/data", "release": OLD}
        assert calls[1]["kwargs"]["kept_config"] == f"/data/zk/cuzk.toml.for-{OLD}"
    elif kind == "validate":  # the release gone back to, with its own bench
        assert f"/data/releases/{OLD}/cuzk-bench" in kwargs["command"]
        assert kwargs["release"] == OLD and kwargs["require_executable"] is True
    else:
        assert calls[0]["call"] == {"start": "start", "ready": "wait_ready"}[kind]


def _sent(fleet: Fleet, name: str) -> list[dict[str, Any]]:
    out = []
    for line in fleet.hosts[name].sent:
        if line.startswith("call ops."):
            call, _, kwargs = line.removeprefix("call ops.").partition(" ")
            out.append({"call": call, "kwargs": json.loads(kwargs)})
    return out


def test_the_controllers_rollback_sends_the_calls_the_recipe_carries(tmp_path: Path) -> None:
    """A validation that fails: the controller's rollback sends, for stop, switch and start,
    exactly the calls the guard's recipe for phase started carries."""
    fleet = Fleet(tmp_path, ["h1"]).serving(OLD)
    recipe = rollback_recipe(_plan_of(fleet, "h1", NEW))["started"]
    host = fleet.hosts["h1"]
    host.faults, host.bad_release = {"validate"}, NEW
    host.sent.clear()
    summary = fleet.roll(NEW)
    assert summary.outcomes["h1"].status == "rolled_back", summary.outcomes["h1"]
    sent = _sent(fleet, "h1")
    for entry in recipe["calls"]:
        if entry["step"] in ("stop", "switch", "start"):
            for call in entry["calls"]:
                assert call in sent, (entry["step"], call)
    assert host.current == OLD


def test_the_dry_run_prints_each_call() -> None:
    target = Target(small_host(), Layout("/data"), settings_for(small_host()))
    action = stop_action(HostFacts(), target, StopParams(work=False))
    step = PlannedStep(SimpleNamespace(name="stop", kind="stop"), action)
    lines = describe(step)
    assert any(line.startswith("      calls: stop(root='/data', signal='SIGTERM', grace=10.0, "
                               "status_url=") for line in lines), lines


def test_the_dry_run_never_shows_validate_env_and_cuts_long_values() -> None:
    secret = "export TOKEN='hunter2-very-secret'; bench --fast"
    line = call_line(Call("prove", {"command": secret, "pattern": "x" * 500}))
    assert "hunter2" not in line and "export TOKEN=...; bench --fast" in line, line
    assert len(line) < 250 and line.endswith("...)"), line
    odd = call_line(Call("prove", {"command": "export A='it'\"'\"'s'; bench"}))
    assert "export A=...; bench" in odd or "not shown" in odd, odd
    skip = PlannedStep(SimpleNamespace(name="x", kind="stop"), Action("s"))
    assert not any("calls:" in ln for ln in describe(skip))
