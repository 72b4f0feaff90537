"""The budget rule as a table, in the style of pyinfra's operation fixtures: each file under
cases/budget/ gives a host's facts and the playbook's settings, and expects the budget (the
figure config writes, drain and the guard pass) or preflight's refusal. Every case is also
run through each user of the rule (config, preflight, drain, the guard's recipe), which
must agree with it.

A case's facts are either `files` (a cgroup tree, v1 or v2, read by the host's own facts
reader, with an optional `meminfo` as the host reports it) or `reported` (the facts as a host
sent them: hostile JSON). Its settings are checked by the playbook's own declarations; a case
whose settings those refuse expects `invalid` (the key named)."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from contexts import small_host
from pydantic import ValidationError

from rollout.config.sections import DaemonSpec, PreflightSpec, ValidateSpec
from rollout.engine.hostplan import HostPlan
from rollout.errors import StepFailed
from rollout.host.facts import HostFacts
from rollout.host.layout import Layout
from rollout.host.scripts import ops as ops_script
from rollout.host.scripts.actions import facts as facts_script
from rollout.steps import config
from rollout.steps.budget import BudgetRule, decide_budget
from rollout.steps.decision import Target
from rollout.steps.kinds import drain, preflight
from rollout.steps.kinds.drain import DrainParams
from rollout.steps.preflight_inputs import Look

CASES = sorted((Path(__file__).parent / "cases" / "budget").glob("*.json"))


def drain_recipe(ctx: Any, plan: HostPlan) -> dict[str, Any]:
    """The drain settings the guard's recipe carries: its rollback drain call's (the guard's
    recipe is the rollback actions' calls serialised, rollout.engine.guard.rollback_recipe)."""
    settings = plan.rollback_action("drain", None).calls[0].kwargs.get("settings")
    return dict(settings) if isinstance(settings, dict) else {}


def settings_of(case: dict[str, Any]) -> Any:
    given = case["settings"]
    return SimpleNamespace(daemon=DaemonSpec.model_validate(given.get("daemon", {})),
                           preflight=PreflightSpec.model_validate(given.get("preflight", {})),
                           validation=ValidateSpec.model_validate(given.get("validate", {})))


def facts_of(case: dict[str, Any], tmp: Path) -> HostFacts:
    facts = case["facts"]
    if "reported" in facts:
        return HostFacts.parse(facts["reported"])
    root = tmp / "cgroup"
    root.mkdir()
    for name, text in facts["files"].items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return HostFacts.parse({"cgroup": facts_script.cgroup(str(root)),
                            "meminfo": facts.get("meminfo")})


def test_there_are_cases_for_every_kind_of_host() -> None:
    names = {p.stem for p in CASES}
    for kind in ("v1", "v2", "no_cgroup", "max", "tiny", "larger_than_the_limit",
                 "hostile_negative", "hostile_huge", "hostile_string", "invalid"):
        assert any(kind in n for n in names), kind


@pytest.mark.parametrize("path", CASES, ids=lambda p: p.stem)
def test_budget_case(path: Path, tmp_path: Path) -> None:
    case = json.loads(path.read_text())
    expect = case["expect"]
    if "invalid" in expect:
        with pytest.raises(ValidationError, match=expect["invalid"]):
            settings_of(case)
        return
    settings = settings_of(case)
    facts = facts_of(case, tmp_path)
    target = Target(host=small_host(), layout=Layout(), settings=settings)
    ctx = SimpleNamespace(settings=settings, target=target)

    budget = decide_budget(facts.memory, BudgetRule.of(settings))
    assert budget.size == expect["budget"], budget
    refused = expect.get("refused")
    assert (budget.refusal is not None) == bool(refused), budget

    notes: list[str] = []  # preflight: the rule's refusal, word for word, or its note
    problems = preflight.check_budget(Look(target, facts), notes)  # type: ignore[arg-type]
    if refused:
        assert problems == [budget.refusal]
        assert all(words in problems[0] for words in refused), problems
        assert notes == []
    else:
        assert problems == [] and len(notes) == 1
        assert expect.get("note", "budget") in notes[0], notes

    if expect["budget"] is None:  # config: the figure it writes, or the rule's reason
        with pytest.raises(StepFailed, match="cannot size the memory budget: "):
            config.memory_budget(facts, target)
    else:
        assert config.memory_budget(facts, target) == expect["budget"]
        written = config.ConfigText("", expect["budget"], None).budget_text
        assert written == expect.get("config", written)

    # drain and the guard's recipe carry the same figure, as data; none without one
    how = drain.drain_action(target, DrainParams(), facts.memory).detail
    assert how.budget == expect["budget"]
    assert how.settings().get("budget") == how.budget
    assert (how.no_budget is None) == (expect["budget"] is not None)
    recipe = drain_recipe(ctx, HostPlan(facts, target, None, ()))  # type: ignore[arg-type]
    assert recipe.get("budget") == expect["budget"]
    assert "margin" not in recipe


@pytest.mark.parametrize("budget, figure", [
    (900, 900), (None, None), ("900", None), (True, None), (9.5, None),
])
def test_the_guard_passes_the_recipes_figure_and_never_works_out_one(
    budget: Any, figure: int | None
) -> None:
    """ops.drain takes the recipe's budget as it came (an int, else none), and no margin,
    whatever the recipe holds."""
    given = {} if budget is None else {"budget": budget}
    settings = {"deadline": 60.0, "margin": 64, **given}
    figures = ops_script.drain_figures(settings)
    assert figures.budget == figure and figures.deadline == 60.0
    assert figures.plateau == 30.0


def test_every_proof_kind_of_the_table_is_the_settings_and_has_its_figures() -> None:
    """validate.proof_kind takes exactly the kinds of the one table, and the rule reads its
    figures there: SRS, one partition, the PCE extraction and the PCE (memory.rs)."""
    from rollout.config.params_manifest import kinds
    from rollout.steps.budget import ProofNeed

    for name in kinds():
        assert ValidateSpec(proof_kind=name).proof_kind == name
        assert ProofNeed.of(name) is not None
    need = ProofNeed.of("porep-32g")
    assert need is not None and need.one_proof.bytes == (44 + 14) << 30
    assert need.floor.bytes == (44 + 14 + 14) << 30 and need.cached.bytes == 84 << 30
    assert ProofNeed.of(None) is None
    assert ValidateSpec().proof_kind is None  # the default playbook sets porep-32g
    rule = BudgetRule("cgroup", "0", "1GiB", None)  # no kind: min_budget alone
    refusal, warning = rule.judge(1 << 29)
    assert refusal is not None and "preflight.min_budget" in refusal and warning is None
