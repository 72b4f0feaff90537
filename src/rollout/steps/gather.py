"""Facts as pyinfra has them: a read action's name with its arguments, gathered for the
whole plan of a host in one round trip (ops.batch) before any step is decided.

A kind declares the facts its decide needs (Kind.facts: from the target and its params);
the engine gathers them beside the host's base facts (HostFacts.reads, cached by name and
arguments: two kinds asking the same read get one answer). The cache lives with the plan's
facts, and goes with them once an action runs (HostState.facts). A report is hostile data:
the check that reads it parses it (rollout.host.reports); a fact not gathered is judged when
the step runs.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Protocol

from rollout.errors import StepFailed
from rollout.host.facts import HostFacts, fact_key
from rollout.jsontypes import JSON, JSONObject

BATCH_SLACK = 30.0  # the round trip's own time beside its reads' timeouts


@dataclass(frozen=True)
class Fact:
    """One host read: an ops action's name, its arguments, the seconds it may take."""

    name: str
    kwargs: JSONObject = field(default_factory=dict)
    timeout: float = 30.0

    @property
    def key(self) -> str:
        return fact_key(self.name, self.kwargs)


class Host(Protocol):
    """What gathering needs of a host's context (rollout.steps.base.HostContext)."""

    def call(self, action: str, call_timeout: float | None = None, **kwargs: JSON
             ) -> JSONObject: ...


def gather(ctx: Host, facts: HostFacts, wanted: list[Fact]) -> HostFacts:
    """`facts` with every wanted fact not cached in them read, in one round trip (ops.batch;
    one the host did not answer in it is read on its own, and left out if that fails)."""
    todo = list({f.key: f for f in wanted if f.key not in facts.reads}.values())
    if not todo:
        return facts
    reports: list[object] = []
    if len(todo) > 1:
        out = ctx.call("batch", call_timeout=BATCH_SLACK + sum(f.timeout for f in todo),
                       calls=[{"call": f.name, "kwargs": f.kwargs} for f in todo])
        got = out.get("reports")
        reports = got if isinstance(got, list) and len(got) == len(todo) else []
    reads = dict(facts.reads)
    for i, fact in enumerate(todo):
        report = reports[i] if i < len(reports) else None
        if not isinstance(report, dict) or report.get("outcome") == "bad-call":
            report = _alone(ctx, fact)
        if report is not None:
            reads[fact.key] = report
    return replace(facts, reads=reads)


def _alone(ctx: Host, fact: Fact) -> JSONObject | None:
    try:
        return ctx.call(fact.name, call_timeout=fact.timeout, **fact.kwargs)
    except StepFailed:
        return None  # judged when its step runs, which reads it again
