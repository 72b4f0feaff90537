"""Single steps hold the lock or do nothing (issue 18): a host whose lock could not be taken
(the lock script failed, the host unreachable) gets no step at all and the command fails;
a stop that signalled nothing (an untrusted pidfile) is not a success; --break-lock and
--lock-wait are accepted wherever a lock hint names them; --lock-wait is finite."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest
from fakehost import FakeHost
from test_cli_tasks import run_rollout
from test_engine import Fleet
from test_one_machine import _fake_put_with_progress, _lock_on  # noqa: F401 - a fixture

from rollout.commands import app, single
from rollout.commands.app import step_spec
from rollout.engine.locks import LockPolicy, holder_for
from rollout.engine.run import Engine, EngineOptions
from rollout.errors import UserError
from rollout.output.events import EventBus, Status, StepResult


def _engine(fleet: Fleet, folder: Path) -> tuple[Engine, FakeHost]:
    plan = fleet.plan()
    host = fleet.hosts["h1"]
    host.daemon, host.current = "aaaaaaaaaaaa", "aaaaaaaaaaaa"
    host.call = _lock_on(host, folder)  # type: ignore[method-assign]
    options = EngineOptions(holder_for("r1", "op", "ctl", "single:stop"), LockPolicy())
    return Engine(plan, EventBus(plan.run_id), lambda h: fleet.hosts[h.name], fleet.tmp,
                  options), host


def test_a_lock_that_cannot_be_taken_stops_nothing(tmp_path: Path) -> None:
    folder = tmp_path / "data"
    folder.mkdir()
    (folder / "rollout").write_text("a file where the state folder should be")
    fleet = Fleet(tmp_path, ["h1"])
    engine, host = _engine(fleet, folder)
    results = engine.run_steps_on("h1", [step_spec(engine.plan, "stop")])
    assert [r.status for r in results] == [Status.FAILED]
    assert results[0].reason.startswith("not locked, nothing done")
    assert host.daemon == "aaaaaaaaaaaa" and not host.sent  # the daemon was never stopped
    assert single.not_done(results)


def test_a_taken_lock_lets_the_step_run(tmp_path: Path) -> None:
    fleet = Fleet(tmp_path, ["h1"])
    engine, host = _engine(fleet, tmp_path / "data")
    results = engine.run_steps_on("h1", [step_spec(engine.plan, "stop")])
    assert [r.status for r in results] == [Status.CHANGED] and host.daemon is None
    assert single.not_done(results) == []


def test_a_stop_that_signalled_nothing_is_not_done() -> None:
    untrusted = StepResult(Status.SKIPPED, "hold set; nothing signalled: daemon.pid not "
                           "trusted: exe differs", {"outcome": "untrusted"})
    assert single.not_done([untrusted]) == [f"nothing was stopped: {untrusted.reason}"]
    none = StepResult(Status.SKIPPED, "hold set; no daemon pidfile", {"outcome": "none"})
    assert single.not_done([none]) == []


@pytest.mark.parametrize("wait", [math.nan, math.inf, -1.0])
def test_lock_wait_must_be_finite_and_not_negative(wait: float) -> None:
    with pytest.raises(UserError, match="--lock-wait"):
        LockPolicy(wait)


@pytest.mark.parametrize("command", ["stop", "drain", "start", "validate"])
def test_single_steps_accept_break_lock_and_lock_wait(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, command: str,
    capsys: pytest.CaptureFixture[str],
) -> None:
    calls: list[tuple[Any, ...]] = []

    def run_steps(*args: Any) -> list[StepResult]:
        calls.append(args)
        return [StepResult(Status.SKIPPED, "nothing signalled", {"outcome": "untrusted"})]

    monkeypatch.setattr(single, "run_steps", run_steps)
    inventory = tmp_path / "fleet.yaml"
    inventory.write_text("hosts: []\n")
    monkeypatch.setenv("ROLLOUT_HOSTS", str(inventory))
    code = run_rollout(command, "lab-1", "--break-lock", "--lock-wait", "5")
    assert calls and calls[0][-2:] == (5.0, True)
    assert code == 1  # the (fake) step signalled nothing
    assert "not done: nothing was stopped" in capsys.readouterr().err


def test_heal_accepts_break_lock(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    import rollout.commands.heal as heal

    seen: list[tuple[Any, ...]] = []
    monkeypatch.setattr(heal, "heal", lambda *args: seen.append(args) or 0)
    inventory = tmp_path / "fleet.yaml"
    inventory.write_text("hosts: []\n")
    assert run_rollout("heal", "--hosts", str(inventory), "--break-lock") == 0
    assert seen and seen[0][-1] is True
    assert app is not None
