"""The kinds' records answer as the engine's own tables did before they moved into `Kind`
(issue 26): a rollback's seconds per kind, the rollback's kinds (with and without a release
to go back to, after each kind's own failure), what the guard tolerates, and the fleet
rollback's steps and params. The old tables are written out here, once, as the reference."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest
from contexts import lab_playbook, settings_for, small_host

from rollout.commands.rollback import ROLLBACK_STEPS, _rollback_spec
from rollout.engine.guard import rollback_recipe
from rollout.engine.hostplan import LOST, HostPlan, rollback_plan
from rollout.engine.recovery import _timeout
from rollout.host.facts import HostFacts
from rollout.host.layout import Layout
from rollout.steps.decision import Phase, Release, Target
from rollout.steps.kinds import KINDS, UNDONE

OLD, NEW = "old0000release", "new1111release"
FAILED = (*KINDS, None, LOST)


def old_timeout(settings: Any, kind: str) -> float | None:
    """engine/recovery.py's table before the records."""
    daemon = settings.daemon
    return {"drain": float(daemon.drain.deadline) + 60,
            "ready": float(daemon.ready_timeout) + 30}.get(kind)


def old_kinds(failed: str | None, previous: str | None) -> tuple[str, ...]:
    """engine/hostplan.py's rollback kinds before the records (a host that left untouched
    and has not validated)."""
    if not previous or previous == NEW:
        return ("stop",)
    return tuple(k for k in UNDONE if not (k == "drain" and failed == "drain"))


def settings_with(deadline: float, ready_timeout: float) -> Any:
    lab = settings_for(small_host())
    drain = lab.daemon.drain.model_copy(update={"deadline": deadline})
    daemon = lab.daemon.model_copy(update={"drain": drain, "ready_timeout": ready_timeout})
    return lab.model_copy(update={"daemon": daemon})


@pytest.mark.parametrize("deadline, ready_timeout", [(300, 60), (17.5, 4), (1, 1000)])
@pytest.mark.parametrize("kind", list(KINDS))
def test_a_rollbacks_seconds_per_kind_are_the_old_tables(
    kind: str, deadline: float, ready_timeout: float
) -> None:
    settings = settings_with(deadline, ready_timeout)
    ctx: Any = SimpleNamespace(settings=settings)
    assert _timeout(ctx, kind) == old_timeout(settings, kind)


@pytest.mark.parametrize("previous", [OLD, None, NEW])
@pytest.mark.parametrize("phase", [Phase.STOPPED, Phase.SWITCHED, Phase.STARTED])
@pytest.mark.parametrize("failed", FAILED)
def test_the_rollbacks_kinds_are_the_old_tables(
    failed: str | None, phase: Phase, previous: str | None
) -> None:
    plan = rollback_plan(phase, failed, previous, NEW)
    assert plan.kinds == old_kinds(failed, previous)


def test_a_failed_drain_is_not_redone_and_says_why() -> None:
    assert rollback_plan(Phase.STOPPED, "drain", OLD, NEW).kinds == (
        "stop", "switch", "start", "ready", "validate")
    assert [k for k in KINDS if KINDS[k].not_redone] == ["drain"]
    assert "without waiting again" in KINDS["drain"].not_redone
    assert rollback_plan(Phase.STOPPED, None, None, NEW).kinds == ("stop",)


def test_the_guard_tolerates_a_failed_drain_only() -> None:
    target = Target(small_host(), Layout("/data"), settings_for(small_host()),
                    Release(NEW, "", "", ()))
    recipe = rollback_recipe(HostPlan(HostFacts(), target, OLD, ()))
    steps = [s for phase in recipe.values() for s in phase["calls"]]
    assert {s["step"] for s in steps} == set(UNDONE)
    assert all(s["tolerate"] == (s["step"] == "drain") for s in steps)


def test_the_fleet_rollbacks_steps_and_params_are_the_old_ones() -> None:
    assert ROLLBACK_STEPS == ("preflight", "stop", "drain", "switch", "start", "ready",
                              "validate")
    assert [k for k in KINDS if KINDS[k].checks_changes] == ["preflight"]
    plan: Any = SimpleNamespace(playbook=lab_playbook())
    for kind in ROLLBACK_STEPS:
        spec = _rollback_spec(plan, kind)
        assert spec.kind == kind
        assert spec.params.get("restore_config") is (True if kind == "switch" else None)
