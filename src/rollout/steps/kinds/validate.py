"""validate: prove the daemon works: a validation proof whose result block (one, on stdout),
not its exit code, decides."""

from __future__ import annotations

import re

from pydantic import Field

from rollout.config.sections import CommandField
from rollout.config.steps import KindRule, ParamSeconds, StrictParams
from rollout.errors import RolloutError, StepFailed
from rollout.host.facts import HostFacts
from rollout.output.events import StepResult, ok
from rollout.secrets import tail
from rollout.steps.base import HostContext, Kind, judged
from rollout.steps.budget_wait import budget_wait_failure
from rollout.steps.daemon import already_validated
from rollout.steps.decision import Action, Decision, Target
from rollout.steps.identity import check_ports
from rollout.steps.validate import (
    ensure_input,
    evidence_doc,
    fail_if_budget_too_small,
    probe,
    probe_call,
    record_evidence,
    run_proof,
    validation_call,
)


class ValidateParams(StrictParams):
    command: CommandField | None = Field(
        default=None,
        description="Instead of validate.command (a string or an argv list; validate.env "
        "applies to it too).",
    )
    success_pattern: str | None = Field(
        default=None, description="Instead of validate.success_pattern."
    )
    timeout: ParamSeconds | None = Field(
        default=None, gt=0, description="Seconds for the proof command (validate.timeout)."
    )


def decide(facts: HostFacts, target: Target, params: ValidateParams) -> Decision:
    skip = already_validated(facts, target)
    if skip is not None:
        return skip
    pattern = params.success_pattern or target.settings.validation.success_pattern
    return Action(f"run the validation proof; success is a line matching {pattern!r}", params,
                  calls=(probe_call(target), validation_call(target, params, target.release_id)))


def apply(ctx: HostContext, action: Action) -> StepResult:
    """Two round trips: the input check, /status and the ports' owners; then the action's
    proof, bounded, with the evidence written where it passed (and /status again if it
    hung). The controller decides from what they return, by the one judge."""
    spec = ctx.settings.validation
    seen = probe(ctx)
    check_ports(ctx, seen.status, seen.owners)  # the proof must reach the daemon started
    fail_if_budget_too_small(seen.status, spec.proof_kind)
    staged = ensure_input(ctx, seen.input)  # (never staged for a daemon not running)
    counters = (seen.status or {}).get("counters")
    before = counters if isinstance(counters, dict) else None
    record, evidence = evidence_doc(ctx)
    call = action.calls[-1].plus(record=record)
    proof = run_proof(ctx, call)
    r = proof.result
    output = tail(r.stdout + r.stderr, 4000)
    if proof.budget_wait is not None:
        raise budget_wait_failure(proof.budget_wait, spec.proof_kind, output)
    if proof.hung:
        counters = (proof.status_after or {}).get("counters")
        after = counters if isinstance(counters, dict) else None
        seconds = call.kwargs.get("timeout")
        raise StepFailed(
            f"validation hung (no result in {seconds:g} s): killed; daemon counters "
            f"before {before}, after {after}",
            retryable=False,
            output=output,
            data={"hung": True, "timeout": seconds, "counters_before": before,
                  "counters_after": after},
        )
    try:
        result = judged("validate", [call], [proof.report], output=output)
    except StepFailed:
        if proof.recorded:  # the verdict is the controller's: no evidence of a failed proof
            ctx.call("forget_validated", root=ctx.layout.root)
        raise
    job = re.search(r"^job_id:\s*(\S+)", r.stdout, re.MULTILINE)
    if record and not proof.recorded:  # the host's python read the pattern otherwise
        record_evidence(ctx, record)
    return ok(
        f"{result.reason} ({staged}; {evidence})",
        job_id=job.group(1) if job else None,
        output_tail=tail(output, 1000),
    )


def undo(target: Target, facts: HostFacts, params: ValidateParams, to: str | None) -> Action:
    """A rollback's validate: proving `to` with this plan's validation (its command rendered
    for `to`; never a bench not on the host)."""
    try:
        calls = (validation_call(target, params, to, require_executable=True),)
    except RolloutError as e:  # the validate step fails the same way
        return Action("rollback validate", params, fails=str(e))
    return Action("rollback validate", params, calls=calls)


KIND = Kind("validate", ValidateParams,
            KindRule("validated", reaches="validated", by_evidence=True), place=100,
            decide=decide, apply=apply, undo=undo)
