"""Failures stay in their step: any exception is that host's failed step, rollback runs,
and every run ends with a run_end event."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from contexts import AgentTransport

from rollout.config.inventory import Host
from rollout.engine import run as engine_module
from rollout.engine.plan import Plan
from rollout.engine.run import Engine, EngineOptions
from rollout.output.events import EventBus, StepResult, changed
from rollout.steps.base import HostContext, Release
from rollout.steps.decision import Action, Stopped
from rollout.steps.kinds import KINDS, load_playbook

PLAYBOOK = """\
name: test
release: {root: ROOT}
build: {dockerfile: Dockerfile, context: ., image_paths: {cuzk-daemon: /d, cuzk-bench: /b}}
steps:
  - {name: stop, kind: stop}
  - {name: start, kind: start, when: "host.vars.gpus > 0"}
"""
HOST = Host("h1", "127.0.0.1", 22, "root", None, Path("/k"), "strict", 10, (), {"gpus": 1})


def make_engine(tmp_path: Path, when_vars: dict[str, Any] | None = None) -> Engine:
    (tmp_path / "Dockerfile").touch()
    (tmp_path / "play.yaml").write_text(PLAYBOOK.replace("ROOT", str(tmp_path / "data")))
    playbook = load_playbook(tmp_path / "play.yaml")
    host = replace(HOST, vars=when_vars if when_vars is not None else HOST.vars)
    plan = Plan("run-1", playbook, [host], [[host.name]])
    options = EngineOptions(target=lambda ctx: Release("r1", "", "", ()))
    return Engine(plan, EventBus("run-1"), lambda h: AgentTransport(h.name), tmp_path, options)


def act(facts: Any, target: Any, params: Any) -> Action:
    return Action("act")


def fake_stop(ctx: HostContext, action: Action) -> StepResult:
    ctx.state.stopped = Stopped()
    return changed("stopped")


def boom(ctx: HostContext, action: Action) -> StepResult:
    raise KeyError("pid")


def ends(engine: Engine) -> list[dict[str, Any]]:
    return [e.__dict__ for e in engine.bus.history if e.kind in ("step_end", "run_end")]


@pytest.fixture
def steps(monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    monkeypatch.setitem(KINDS, "stop", replace(KINDS["stop"], decide=act, apply=fake_stop))
    monkeypatch.setitem(KINDS, "start", replace(KINDS["start"], decide=act, apply=boom))
    return KINDS


def test_any_exception_in_a_step_is_that_hosts_failed_step(
    tmp_path: Path, steps: dict[str, Any]
) -> None:
    engine = make_engine(tmp_path, {"gpus": 1})
    summary = engine.run()
    outcome = summary.outcomes["h1"]
    assert outcome.status == "failed"
    assert "start failed: internal error" in outcome.reason and "KeyError" in outcome.reason
    names = [e["step"] for e in ends(engine) if e["kind"] == "step_end"]
    assert names == ["stop", "start", "rollback-stop"]  # the rollback ran
    assert ends(engine)[-1]["kind"] == "run_end"
    assert summary.exit_code == 1


def test_a_when_that_fails_at_run_time_fails_its_step_and_rolls_back(
    tmp_path: Path, steps: dict[str, Any]
) -> None:
    engine = make_engine(tmp_path, {})  # host.vars.gpus is undefined on this host
    outcome = engine.run().outcomes["h1"]
    assert outcome.status == "failed"
    assert "play.yaml:6: steps[1].when" in outcome.reason
    names = [e["step"] for e in ends(engine) if e["kind"] == "step_end"]
    assert names == ["stop", "start", "rollback-stop"]


def test_a_bug_outside_the_steps_still_ends_the_run(
    tmp_path: Path, steps: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    engine = make_engine(tmp_path)

    def broken(*args: object) -> None:
        raise RuntimeError("engine bug")

    monkeypatch.setattr(engine_module.Batches, "run", broken)
    with pytest.raises(RuntimeError):
        engine.run()
    last = engine.bus.history[-1]
    assert last.kind == "run_end"
    assert "engine bug" in str(last.reason)
