"""Whether the daemon's /status shows a budget with which cuzk never proves the validation's
kind (issue 17, issue 27): cuzk's memory `acquire` waits forever for a reservation the
budget cannot hold (one proof's SRS and partition, or a partition beside the first proof's
PCE extraction), so such a validation fails at once with that cause instead of at
validate.timeout. The judgement is preflight's (rollout.steps.budget.ProofNeed.refusal),
applied to the budget the daemon says it has.

Pure: a /status document (hostile data from the host) in, a reason or None out. Only
positive evidence counts: a missing, foreign or mistyped /status, or no validate.proof_kind,
is "unknown" and never fails a validation by itself."""

from __future__ import annotations

from typing import Any

from rollout.host.scripts.common import HUGE_LIMIT, format_size
from rollout.steps.budget import ProofNeed


def _bytes(value: Any) -> int | None:
    """A positive whole number of bytes below HUGE_LIMIT; None for anything else (a bool,
    a string, a float, zero, a negative figure, cgroup v1's 'no limit')."""
    if isinstance(value, bool) or not isinstance(value, int):
        return None
    return value if 0 < value < HUGE_LIMIT else None


def budget_total(status: Any) -> int | None:
    """/status memory.total_bytes, where it is a usable figure."""
    memory = status.get("memory") if isinstance(status, dict) else None
    return _bytes(memory.get("total_bytes")) if isinstance(memory, dict) else None


def budget_too_small(status: Any, kind: str | None) -> str | None:
    """The cause, with the figures, where /status says the daemon's whole budget is one
    with which cuzk never proves `kind`; None where it can or nothing is known."""
    need = ProofNeed.of(kind)
    total = budget_total(status)
    refusal = need.refusal(total) if need is not None and total is not None else None
    if refusal is None:
        return None
    return (f"the daemon's budget {format_size(total)} ({total} bytes) cannot hold one {kind} "
            f"proof: it is {refusal}")
