"""Step declarations of a playbook: which step, in which order, with which retry policy."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from .durations import Seconds


class StepKind(StrEnum):
    """The controller's kinds; each host kind is a module of rollout.steps.kinds."""

    BUILD = "build"
    EXTRACT = "extract"


CONTROLLER_KINDS: tuple[str, ...] = (StepKind.BUILD, StepKind.EXTRACT)
"""Kinds that run once, on the controller, before any host step."""

Scope = Literal["controller", "host"]
ParamSeconds = Annotated[Seconds, Field(strict=True)]
"""A step param in seconds: a number (never a string or a bool), finite, at most a week."""


class FailureClass(StrEnum):
    """What went wrong, as far as retry policies are concerned."""

    ANY = "any"
    TRANSPORT = "transport"  # connection refused, dropped, host key trouble
    COMMAND_FAILED = "command_failed"  # a command exited non-zero
    TIMEOUT = "timeout"  # the step or a command ran past its time
    STEP_FAILED = "step_failed"  # the step's check failed (e.g. the proof said FAILED)


class StrictParams(BaseModel):
    """A model of params: unknown keys refused, frozen."""


    model_config = ConfigDict(extra="forbid", frozen=True, coerce_numbers_to_str=True)

    def load_warnings(self) -> list[tuple[str, str]]:
        """(key, why) for each value that loads but does not do what it seems to."""
        return []


class RetryPolicy(StrictParams):
    """When and how often the engine repeats a failed step (exponential backoff)."""

    attempts: int = Field(default=1, ge=1, description="Total attempts, the first one included.")
    backoff: Seconds = Field(
        default=1.0, ge=0, description="Seconds to wait before the first retry."
    )
    multiplier: float = Field(
        default=2.0, ge=1, le=100, description="Each later wait is this times the last."
    )
    max_backoff: Seconds = Field(
        default=60.0, ge=0, description="Longest wait between attempts, seconds."
    )
    jitter: Seconds = Field(
        default=0.0, ge=0, description="Random seconds (0..jitter) added to each wait."
    )
    on: list[FailureClass] = Field(
        default_factory=lambda: [FailureClass.ANY],
        min_length=1,
        description="Failure classes that are retried: any, transport, command_failed, "
        "timeout, step_failed.",
    )

    def retries(self, failure: FailureClass) -> bool:
        """Whether a failure of this class may be retried (attempts permitting)."""
        return FailureClass.ANY in self.on or failure in self.on

    def delay(self, attempt: int) -> float:
        """Seconds to wait after failed attempt number `attempt` (1-based), jitter excluded."""
        return float(min(self.max_backoff, self.backoff * self.multiplier ** (attempt - 1)))


class NoParams(StrictParams):
    """This kind takes no params."""


HOST_PHASES = ("untouched", "stopped", "switched", "started", "validated")
"""The phases a host goes through in a run, in order; a host's rollback is decided from the
phase it reached (rollout.engine.hostplan.rollback_plan)."""


@dataclass(frozen=True)
class KindRule:
    """Where a host step kind stands in a playbook, and what the engine must know of it.
    Declared in the kind's module (rollout.steps.kinds); the engine's tables derive from it."""

    phase: str | None  # the phase the host is in while it runs (None: anywhere)
    enters: str | None = None  # the phase a host is in as soon as an action of it begins
    reaches: str | None = None  # the phase a host reaches when an action of it succeeds
    needs: tuple[str, ...] = ()  # kinds one of which must come before it
    after: tuple[str, ...] = ()  # kinds that, where the playbook has them, come before it
    changes: bool = False  # it changes what a host runs or holds: preflight guards it
    by_evidence: bool = False  # skipped where the running daemon already passed validation
    moved_after: str | None = None  # an earlier release let it come before this kind: it
    # still loads, with a warning, and runs right after the first step of that kind


Rules = Mapping[str, KindRule]
"""Each host kind's rule, by name (rollout.steps.kinds.KINDS gives them)."""


def step_order_problem(steps: list[tuple[str, str]], rules: Rules) -> tuple[int, str] | None:
    """(the index of the first host step out of order, why), or None when the host steps run
    in phase order and each comes after a step it needs. Controller kinds are not ranked."""
    seen: list[tuple[str, str]] = []
    for index, (name, kind) in enumerate(steps):
        rule = rules.get(kind)
        if rule is None:
            continue
        early = next((i for i, (_, k) in enumerate(seen) if kind in rules[k].after), None)
        if early is not None:
            other, other_kind = seen[early]
            return _index_of(steps, other), (
                f"a {other_kind} step must come after the {kind} step {name!r} "
                f"(host steps run in the order {', '.join(HOST_PHASES)})")
        if rule.needs and not any(k in rule.needs for _, k in seen):
            wanted = " or ".join(rule.needs)
            return index, (f"a {kind} step needs a step of kind {wanted} before it (host steps "
                           f"run in the order {', '.join(HOST_PHASES)})")
        later = _later_step(rule, seen, rules)
        if later is not None:
            other, other_kind = later
            return index, (
                f"a {kind} step (phase {rule.phase}) cannot come after step {other!r} "
                f"({other_kind}, phase {rules[other_kind].phase}): host steps run in phase "
                f"order {', '.join(HOST_PHASES)}"
            )
        seen.append((name, kind))
    return None


def corrected_order(steps: list[tuple[str, str]], rules: Rules
                    ) -> tuple[list[int], list[tuple[int, int]]]:
    """The order the steps run in, as indexes into `steps` (each rule's moved_after
    applied), and each step moved: its index and the index of the step it now follows."""
    order = list(range(len(steps)))
    moved: list[tuple[int, int]] = []
    for kind, rule in rules.items():
        anchor = rule.moved_after
        first = next((i for i in order if steps[i][1] == anchor), None)
        early = [] if first is None else [
            i for i in order[:order.index(first)] if steps[i][1] == kind]
        if first is None or not early:
            continue
        rest = [i for i in order if i not in early]
        at = rest.index(first) + 1
        order = [*rest[:at], *early, *rest[at:]]
        moved += [(i, first) for i in early]
    return order, moved


def _index_of(steps: list[tuple[str, str]], name: str) -> int:
    return next(i for i, (n, _) in enumerate(steps) if n == name)


def _later_step(rule: KindRule, seen: list[tuple[str, str]], rules: Rules
                ) -> tuple[str, str] | None:
    """The first step seen whose phase comes after `rule`'s."""
    if rule.phase is None:
        return None
    rank = HOST_PHASES.index(rule.phase)
    for name, kind in seen:
        phase = rules[kind].phase
        if phase is not None and HOST_PHASES.index(phase) > rank:
            return name, kind
    return None


class StepSpec(StrictParams):
    """One step of the rollout. Steps run in the order given."""

    name: str = Field(pattern=r"^[A-Za-z0-9._-]+$", description="Unique step name.")
    kind: str = Field(
        description="What the step does: build, extract (once, on the controller), or a host "
        "step kind (see Step params by kind)."
    )
    timeout: Seconds | None = Field(
        default=None,
        gt=0,
        description="Seconds before the step fails; null: the kind's own default.",
    )
    retry: RetryPolicy = Field(default_factory=RetryPolicy, description="Retry policy.")
    params: dict[str, Any] = Field(
        default_factory=dict, description="Kind-specific settings (see Step params by kind)."
    )
    when: bool | str = Field(
        default=True,
        description="Run the step only when this is true: a bool or a Jinja2 expression, "
        "evaluated at run time (runtime template).",
    )

    @property
    def scope(self) -> Scope:
        """ "controller" for build and extract (run once), "host" for the others."""
        return "controller" if self.kind in CONTROLLER_KINDS else "host"
