"""A validation whose proof the daemon's whole budget cannot hold fails at once, with the
figures, from /status (issue 17); an unknown or hostile /status never fails it."""

from __future__ import annotations

from typing import Any

import pytest

from rollout.errors import StepFailed
from rollout.steps.budget import ProofNeed
from rollout.steps.proof_budget import budget_too_small
from rollout.steps.validate import fail_if_budget_too_small

GIB = 1 << 30
NEED = ProofNeed.of("porep-32g")


def status(total: Any) -> dict[str, Any]:
    return {"memory": {"total_bytes": total, "used_bytes": 0, "available_bytes": total},
            "pipelines": [], "counters": {"queue_depth": 0}}


def test_the_table_has_a_figure_for_porep_32g() -> None:
    assert NEED is not None and NEED.floor.bytes == NEED.srs + NEED.transient + NEED.partition


def test_a_budget_below_one_proof_names_the_cause_and_both_figures() -> None:
    assert NEED is not None
    cause = budget_too_small(status(32 * GIB), "porep-32g")
    assert cause is not None
    assert "budget 32.0GiB" in cause and str(32 * GIB) in cause
    assert "one porep-32g proof" in cause and str(NEED.one_proof.bytes) in cause
    assert "SRS" in cause and "cuzk would wait forever" in cause


def test_one_byte_short_fails_and_exactly_enough_passes() -> None:
    """Enough: the floor where the first proof's PCE extraction cannot deadlock (issue 27)."""
    assert NEED is not None
    assert budget_too_small(status(NEED.floor.bytes - 1), "porep-32g") is not None
    assert budget_too_small(status(NEED.floor.bytes), "porep-32g") is None
    assert budget_too_small(status(NEED.floor.bytes * 2), "porep-32g") is None


@pytest.mark.parametrize("kind", [None])
def test_a_kind_with_no_figure_is_never_checked(kind: str | None) -> None:
    assert budget_too_small(status(1), kind) is None


@pytest.mark.parametrize("doc", [
    None, "memory", 42, [], [status(GIB)], {}, {"memory": None}, {"memory": "1GiB"},
    {"memory": []}, {"memory": {}}, {"memory": {"used_bytes": 1}},
    status(True), status(False), status("1024"), status(1024.0), status(float("nan")),
    status(0), status(-5), status(None), status([GIB]), status({"n": GIB}),
    status(2**63), status(2**200),
])
def test_an_unreadable_foreign_or_mistyped_status_is_unknown(doc: Any) -> None:
    assert budget_too_small(doc, "porep-32g") is None
    fail_if_budget_too_small(doc if isinstance(doc, dict) else None, "porep-32g")


def test_the_step_fails_not_retried_with_the_figures_in_its_data() -> None:
    with pytest.raises(StepFailed) as failed:
        fail_if_budget_too_small(status(8 * GIB), "porep-32g")
    assert not failed.value.retryable
    assert "validation cannot run: the daemon's budget 8.0GiB" in str(failed.value)
    assert failed.value.data == {"budget_total": 8 * GIB, "proof_kind": "porep-32g"}
