"""The budget floor from cuzk's whole memory model (issue 27): one proof's SRS and partition,
the PCE extraction's transient reservation that the first proof takes and holds while the
PCE waits for its own bytes (curio extern/cuzk/cuzk-core/src/engine.rs, pipeline.rs
insert_blocking, memory.rs PCE_EXTRACTION_TRANSIENT_BYTES), and the PCE. A budget where
the extraction deadlocks every later proof is refused, one where the PCE is never cached
warns, every term named; the validation's checks judge with the same function."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from contexts import host_context
from test_budget_wait import MINE, OTHER, status

from rollout.config.params_manifest import kind, kinds
from rollout.errors import ConfigError
from rollout.host.facts import MemoryFacts
from rollout.host.reports import BudgetWait
from rollout.host.scripts.actions.proving import budget_waiting
from rollout.steps.budget import WARNING, BudgetRule, ProofNeed, decide_budget
from rollout.steps.budget_wait import budget_wait_failure
from rollout.steps.decision import Action
from rollout.steps.kinds import load_playbook, preflight
from rollout.steps.proof_budget import budget_too_small

GIB = 1 << 30
MIB = 1 << 20
LAB_PLAYBOOK = Path(__file__).resolve().parents[2] / "playbooks" / "lab.yaml"


def budget(size: int, proof_kind: str = "porep-32g", min_budget: str = "0") -> Any:
    """The rule for an explicit budget of `size` bytes on a host with room for it."""
    memory = MemoryFacts(limit=size + 8 * GIB, usage=0, source="cgroup-v2")
    return decide_budget(memory, BudgetRule(f"{size // MIB}MiB", "1GiB", min_budget, proof_kind))


@pytest.mark.parametrize(("name", "one", "floor", "cached"), [
    ("porep-32g", 58 * GIB, 72 * GIB, 84 * GIB),
    ("wpost-32g", 71 * GIB, 85 * GIB, 97 * GIB),
    ("snap-32g", 42 * GIB, 56 * GIB, 64 * GIB),
    ("winning-32g", 696 * MIB, 184 * MIB + 14 * GIB + 512 * MIB,
     184 * MIB + 14 * GIB + 512 * MIB),
    ("lab-porep", 58 * MIB, 72 * MIB, 84 * MIB),  # porep-32g at the stand-in's 1/1024
])
def test_every_kind_has_every_figure_and_its_floors(name: str, one: int, floor: int,
                                                    cached: int) -> None:
    need = ProofNeed.of(name)
    assert need is not None
    assert (need.one_proof.bytes, need.floor.bytes, need.cached.bytes) == (one, floor, cached)


def test_the_table_is_the_kinds_cuzk_proves_with_one_figure_each() -> None:
    """cuzk at this commit proves 32 GiB sectors only: no porep-64g; one SRS figure (44 GiB
    for porep-32g, the stand-in's too); PCE sizes for every kind."""
    assert "porep-64g" not in kinds()
    for name in kinds():
        row = kind(name)
        assert min(row.srs, row.partition, row.pce_transient, row.pce_bytes) > 0, name
    assert kind("porep-32g").srs == 44 * GIB and kind("lab-porep").srs == 44 * MIB
    assert kind("porep-32g").pce_transient == 14 * GIB
    standin = (Path(__file__).resolve().parents[2] / "dockerfiles" / "lab-standin"
               / "cuzk-daemon").read_text()
    assert "SRS_BYTES = 44 * GIB" in standin and "PCE_TRANSIENT_BYTES = 14 * GIB" in standin


def test_a_kind_cuzk_cannot_prove_is_refused_at_load_naming_file_line_and_key(
    tmp_path: Path
) -> None:
    text = LAB_PLAYBOOK.read_text().replace("  proof_kind: lab-porep ",
                                            "  proof_kind: porep-64g ", 1)
    assert "porep-64g" in text
    playbook = tmp_path / "lab.yaml"
    playbook.write_text(text)
    with pytest.raises(ConfigError) as e:
        load_playbook(playbook, builds=False)
    said = str(e.value)
    assert "lab.yaml:" in said and "validate.proof_kind: unknown proof kind 'porep-64g'" in said
    assert "the kinds cuzk proves: 32 GiB sectors only" in said and e.value.exit_code == 2


@pytest.mark.parametrize(("size", "refused", "warned"), [
    (58 * GIB - MIB, True, False),  # below one proof
    (58 * GIB, True, False),  # one proof fits; the extraction takes 14 and none fits beside
    (72 * GIB - MIB, True, False),
    (72 * GIB, False, True),  # the floor: proves, the PCE never fits beside the extraction
    (84 * GIB - MIB, False, True),
    (84 * GIB, False, False),  # caches the PCE, proves beside it
    (400 * GIB, False, False),
])
def test_porep_32g_refused_under_72_gib_warned_under_84(size: int, refused: bool,
                                                        warned: bool) -> None:
    decided = budget(size)
    assert (decided.refusal is not None, decided.warning is not None) == (refused, warned)
    note = None if refused else decided.note()
    assert refused or (note is not None and note.startswith(WARNING) == warned)


def test_the_refusal_names_every_term_of_the_floor() -> None:
    refusal = budget(64 * GIB).refusal
    assert refusal is not None
    assert ("memory budget 64.0GiB (68719476736 bytes) is too small for a porep-32g daemon once "
            "its first proof's PCE extraction holds its 14.0GiB, which needs 72.0GiB "
            "(77309411328 bytes) = SRS 44.0GiB + PCE extraction 14.0GiB + one partition "
            "14.0GiB") in refusal
    assert "84.0GiB = SRS 44.0GiB + PCE extraction 14.0GiB + PCE 26.0GiB" in refusal


def test_snap_32g_warns_where_the_extraction_never_starts_and_refuses_where_it_deadlocks(
) -> None:
    """Under SRS + extraction (47 GiB) the extraction never gets its 14 GiB and holds none:
    proofs run, without the PCE; from 47 to 56 GiB it holds them and no 9 GiB partition fits."""
    assert budget(41 * GIB, "snap-32g").refusal is not None
    low = budget(45 * GIB, "snap-32g")
    assert low.refusal is None and low.warning is not None
    assert "never gets its reservation" in low.warning
    assert "56.0GiB (60129542144 bytes) = SRS 33.0GiB + PCE extraction 14.0GiB + one " \
           "partition 9.0GiB" in str(budget(50 * GIB, "snap-32g").refusal)
    assert budget(64 * GIB, "snap-32g").warning is None


def test_a_larger_min_budget_is_named_over_the_model() -> None:
    refusal = budget(64 * GIB, min_budget="200GiB").refusal
    assert refusal is not None and "preflight.min_budget" in refusal
    assert "PCE extraction" not in refusal
    smaller = budget(64 * GIB, min_budget="60GiB").refusal
    assert smaller is not None and "PCE extraction 14.0GiB" in smaller


def test_preflight_emits_its_budget_warning_as_a_warning_event() -> None:
    events: list[tuple[str, dict[str, Any]]] = []
    ctx = host_context(emit=lambda kind, **fields: events.append((kind, fields)))
    note = budget(80 * GIB).note()
    checks = preflight.Checks(("budget",), {"budget": preflight.Verdict((), (note,))})
    result = preflight.apply(ctx, Action("check budget", preflight.PreflightParams(), checks))
    assert note in result.reason
    assert events == [("warning", {"reason": note, "data": {"step": "preflight"}})]
    fits = preflight.Checks(("budget",), {"budget": preflight.Verdict((), (
        budget(84 * GIB).note(),))})
    events.clear()
    preflight.apply(ctx, Action("check budget", preflight.PreflightParams(), fits))
    assert events == []


def test_the_validations_check_uses_the_same_floor() -> None:
    def doc(total: int) -> dict[str, Any]:
        return {"memory": {"total_bytes": total, "used_bytes": 0, "available_bytes": total}}

    cause = budget_too_small(doc(64 * MIB), "lab-porep")
    assert cause is not None and "72.0MiB (75497472 bytes) = SRS 44.0MiB + PCE extraction " \
                                 "14.0MiB + one partition 14.0MiB" in cause
    assert budget_too_small(doc(72 * MIB), "lab-porep") is None  # a warning is no failure


def test_the_budget_watch_tells_too_small_from_busy() -> None:
    """A job waiting where the budget is under the floor (the extraction holds its 14 GiB
    beyond the SRS and PCE: 'releasable' as the host reads it) is too small, never 'cordon
    the host'; over the floor, other work holding the budget is busy."""
    seen = budget_waiting(status([MINE], total=64 * GIB, used=58 * GIB, pce=0), [], 14 * GIB)
    assert seen is not None and seen["releasable"] is True
    seen.update(waited=121.0, limit=120.0)
    wait = BudgetWait.parse(seen)
    assert wait is not None
    failure = budget_wait_failure(wait, "porep-32g", "")
    text = str(failure)
    assert "cordon" not in text and "give the daemon a larger budget" in text
    assert "the budget is too small for a porep-32g daemon once its first proof's PCE " \
           "extraction holds its 14.0GiB" in text
    assert failure.data["too_small"] is True and failure.data["releasable"] is False
    assert failure.data["daemon_floor"] == 72 * GIB
    busy = budget_waiting(status([OTHER, MINE]), ["curio-7"], 14 * GIB)
    assert busy is not None
    busy.update(waited=121.0, limit=120.0)
    wait = BudgetWait.parse(busy)
    assert wait is not None
    text = str(budget_wait_failure(wait, "porep-32g", ""))
    assert "cordon the host (work.cordon)" in text and "too small" not in text
