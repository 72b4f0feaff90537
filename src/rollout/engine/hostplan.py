"""A host's plan, as plain data: each step's decision from one read of the host's facts, and
the rollback for each point where the host can fail.

The engine applies exactly these decisions; --dry-run prints exactly them. A rollback is
decided from the phase the host reached (untouched, stopped, switched, started, validated),
never from step names or messages.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

from rollout.config.render import evaluate_condition
from rollout.errors import Location, RolloutError, StepFailed
from rollout.host.facts import HostFacts
from rollout.output.events import StepResult, skipped
from rollout.steps.base import HostContext
from rollout.steps.decision import Action, Decision, Phase, Skip, Target
from rollout.steps.gather import Fact, gather
from rollout.steps.kinds import KINDS, UNDONE

# The engine's tables, derived from each kind's own declaration (rollout.steps.kinds).
RULES = {name: kind.rule for name, kind in KINDS.items()}
PHASE_AT_START = {str(k): Phase[r.enters.upper()] for k, r in RULES.items() if r.enters}
"""The phase a host is in as soon as an action of this kind begins (it may fail half way)."""
PHASE_AFTER = {str(k): Phase[r.reaches.upper()] for k, r in RULES.items() if r.reaches}
"""The phase a host reaches when an action of this kind succeeds."""
CHANGING = tuple(str(k) for k, r in RULES.items() if r.changes)
"""Kinds that change what a host runs or holds: a plan with none of them acting changes
nothing, and needs no preflight."""
BY_EVIDENCE = tuple(str(k) for k, r in RULES.items() if r.by_evidence)
"""Kinds a host skips on the evidence that its running daemon already passed validation."""
LOST = "controller"
"""The `failed` of rollback_plan for a host whose controller was lost (the guard's plan):
nothing failed, the controller died."""


@dataclass(frozen=True)
class RollbackPlan:
    """What happens to a host that fails in a given phase."""

    kinds: tuple[str, ...]  # rollback steps, in order (rollback-<kind>)
    to: str | None  # the release to point current at (and its config) before the start
    outcome: str  # the host's reason when every rollback step passes
    rolled_back: bool  # success means the host is back on `to`, validated
    warning: bool = False  # the host had validated: the failure is a warning, nothing reverts
    release: str | None = None  # the release the host is left on, when known now
    actions: tuple[Action, ...] = field(default=(), compare=False)  # one per kind (rollback_at)

    def describe(self) -> str:
        if self.warning:
            return "a warning: the host already validated, nothing is reverted"
        if not self.kinds:
            return self.outcome
        if self.rolled_back:
            return f"roll back to {self.to} ({', '.join(self.kinds)})"
        return f"{', '.join(self.kinds)}; {self.outcome}"


def rollback_plan(
    phase: Phase, failed: str | None, previous: str | None, target_id: str | None
) -> RollbackPlan:
    """The rollback of a host that failed at step kind `failed` (None: a revert; LOST: its
    controller was lost, the plan its guard runs) in `phase`. The one rollback rule: the
    controller's rollback and the guard's takeover are both this plan."""
    if phase is Phase.VALIDATED and failed is not None:
        why = "validated; nothing to do" if failed == LOST else "validated; a later step failed"
        return RollbackPlan((), None, why, False, True, target_id)
    if phase is Phase.UNTOUCHED:
        return RollbackPlan(
            (), None, "host untouched: still on its previous release", False, release=previous
        )
    if not previous or previous == target_id:
        return RollbackPlan(
            tuple(k for k in UNDONE if KINDS[k].without_release), None,
            "NO PREVIOUS RELEASE to go back to: host left stopped and held", False
        )
    kinds = tuple(k for k in UNDONE if not (k == failed and KINDS[k].not_redone))
    return RollbackPlan(kinds, previous, f"rolled back to {previous}, validated", True,
                        release=previous)


@dataclass(frozen=True)
class PlannedStep:
    spec: Any  # rollout.config.steps.StepSpec
    decision: Decision
    by_when: bool = False  # skipped because its `when` is false
    rollback: RollbackPlan | None = None  # if this step fails (None: it cannot, it is a skip)

    @property
    def kind(self) -> str:
        return str(self.spec.kind)


@dataclass(frozen=True)
class HostPlan:
    facts: HostFacts
    target: Target
    previous: str | None  # the release to go back to
    steps: tuple[PlannedStep, ...]

    def rollback_at(self, phase: Phase, failed: str | None) -> RollbackPlan:
        """The rollback of this host from `phase`, each step's action decided (its calls):
        what the controller runs, and what the guard's recipe carries."""
        plan = rollback_plan(phase, failed, self.previous, self.target.release_id)
        return replace(plan, actions=tuple(self.rollback_action(k, plan.to) for k in plan.kinds))

    def rollback_action(self, kind: str, to: str | None) -> Action:
        """One rollback step's action, as its kind declares it (Kind.undo), with the params
        of this plan's step of that kind (the kind's defaults where none acts)."""
        undo = KINDS[kind].undo
        if undo is None:  # rollback_plan names only kinds with an undo
            raise ValueError(f"a rollback never runs {kind}")
        return undo(self.target, self.facts, self.params(kind, KINDS[kind].params()), to)

    def params(self, kind: str, default: Any) -> Any:
        """The params this plan's step of `kind` acts with (the default where none acts)."""
        return next((s.decision.params for s in self.steps if s.kind == kind
                     and isinstance(s.decision, Action)
                     and isinstance(s.decision.params, type(default))), default)


def digest_paths(target: Target) -> list[str]:
    """Files whose sha256 the decisions compare: the release, the supervisor, the config."""
    lay = target.layout
    paths = [lay.supervisor, lay.supervisor_conf, target.settings.daemon.config_path]
    if target.release is not None:
        where = lay.release_dir(target.release.id)
        paths += [f"{where}/{a.name}" for a in target.release.artifacts]
    return paths


def needed_facts(target: Target, specs: list[Any]) -> list[Fact]:
    """The facts the plan's steps decide from (each kind's Kind.facts); a step whose params
    do not load needs none (its decide fails it)."""
    wanted: list[Fact] = []
    for spec in specs:
        kind = KINDS.get(str(spec.kind))
        try:
            wanted += kind.facts(target, kind.params.model_validate(spec.params)) if kind else []
        except Exception:  # noqa: BLE001, S112 - its decide says what is wrong
            continue
    return wanted


def plan_gathered(ctx: HostContext, specs: list[Any], facts: HostFacts | None = None,
                  where: Where | None = None, target: Target | None = None) -> HostPlan:
    """The host's plan: decided from its base facts (`facts`, or read now) and, where a step
    that acts needs facts not gathered yet, decided again with them, read in one batch
    (rollout.steps.gather). A plan that changes nothing reads nothing more. `target`: the
    context's own, or the dry run's (a build to come)."""
    target = target or ctx.target
    facts = facts if facts is not None else ctx.facts(*digest_paths(target))
    first = [decide_step(s, facts, target, where) for s in specs]
    plan = plan_host(facts, target, specs, where, first)
    acting = [s.spec for s in plan.steps if isinstance(s.decision, Action)]
    wanted = [f for f in needed_facts(target, acting) if facts.read(f.name, f.kwargs) is None]
    if not wanted:
        return plan
    gathered = gather(ctx, facts, wanted)
    again = [decide_step(s, gathered, target, where) if needed_facts(target, [s]) else d
             for s, d in zip(specs, first, strict=True)]  # a kind reads only what it declares
    return plan_host(gathered, target, specs, where, again)


def previous_release(facts: HostFacts, target: Target) -> str | None:
    """What the host goes back to: what current points at, or pointed at before the release
    being rolled out (a controller that died after the switch)."""
    if facts.current_release and facts.current_release != target.release_id:
        return facts.current_release
    return facts.previous_release


Where = Callable[[Any], Location | None]
"""Where a step is in the playbook (its `when` is named by file:line when it fails)."""


def failure_reason(exc: BaseException) -> str:
    if isinstance(exc, RolloutError):
        return str(exc)
    return f"internal error (a bug in rollout): {type(exc).__name__}: {exc}"


def decide_step(
    spec: Any, facts: HostFacts, target: Target, where: Where | None = None
) -> tuple[Decision, bool]:
    """(the decision, whether it is a skip by `when`). Whatever goes wrong while deciding
    (a `when` that fails at run time, a bug) becomes an Action that fails: the step's
    failure, then the rollback of the phase the host is in."""
    kind = str(spec.kind)
    try:
        context = target.template_context()
        if not evaluate_condition(spec.when, context, where(spec) if where else None):
            return Skip(f"when: {spec.when} is false"), True
        step = KINDS[kind]
        return step.decide(facts, target, step.params.model_validate(spec.params)), False
    except Exception as e:  # noqa: BLE001 - it is the step's failure, not the run's
        return Action(kind, fails=failure_reason(e)), False


def phase_at_start(phase: Phase, kind: str, decision: Decision) -> Phase:
    """The phase once a step begins: an action known to fail changes nothing on the host."""
    if isinstance(decision, Skip) or decision.fails:
        return phase
    return max(phase, PHASE_AT_START.get(kind, phase))


Decided = list[tuple[Decision, bool]]


def _changes_nothing(facts: HostFacts, target: Target, specs: list[Any], decided: Decided
                     ) -> Skip | None:
    """Why preflight has nothing to guard: the host already serves the release and no step of
    the plan that changes a host acts (or fails). None when it has something to guard."""
    rid = target.release_id
    if rid is None or target.pending or not facts.serves(rid, target.layout.release_dir(rid)):
        return None
    pairs = zip(specs, decided, strict=True)
    if any(str(s.kind) in CHANGING and isinstance(d, Action) for s, (d, _) in pairs):
        return None
    return Skip(f"daemon {facts.daemon.pid} already serves release {rid} and this plan "
                "changes nothing on the host: nothing to check before a change")


def _settle(facts: HostFacts, target: Target, specs: list[Any], decided: Decided,
            where: Where | None) -> Decided:
    """The rules across steps. Preflight is skipped where the plan changes nothing. A skip on
    the evidence of validation holds only where no step before it acts: otherwise the
    daemon may not be the one that passed, and the step is decided without the evidence."""
    quiet = _changes_nothing(facts, target, specs, decided)
    out: Decided = []
    for spec, (decision, by_when) in zip(specs, decided, strict=True):
        kind = str(spec.kind)
        if quiet and KINDS[kind].checks_changes and isinstance(decision, Action) and (
                decision.detail is not None or not decision.fails):  # refused by its checks
            decision = quiet
        elif (kind in BY_EVIDENCE and isinstance(decision, Skip) and "evidence" in decision.data
              and any(isinstance(d, Action) for d, _ in out)):
            decision, by_when = decide_step(spec, replace(facts, validated=None), target, where)
        out.append((decision, by_when))
    return out


def plan_host(
    facts: HostFacts, target: Target, specs: list[Any], where: Where | None = None,
    decided: Decided | None = None,
) -> HostPlan:
    """The host's plan from its facts; `decided`: each step's decision already made from
    these facts (decide_step), else made here."""
    previous = previous_release(facts, target)
    phase = Phase.UNTOUCHED
    steps = []
    decided = _settle(facts, target, specs,
                      decided or [decide_step(s, facts, target, where) for s in specs], where)
    for spec, (decision, by_when) in zip(specs, decided, strict=True):
        rollback = None
        if isinstance(decision, Action):
            phase = phase_at_start(phase, str(spec.kind), decision)
            rollback = rollback_plan(phase, str(spec.kind), previous, target.release_id)
            phase = PHASE_AFTER.get(str(spec.kind), phase)
        steps.append(PlannedStep(spec, decision, by_when, rollback))
    return HostPlan(facts, target, previous, tuple(steps))


def apply(ctx: HostContext, kind: str, decision: Decision) -> StepResult:
    """Apply one decision on the host: a skip says why; an action runs its kind's apply."""
    if isinstance(decision, Skip):
        return skipped(decision.reason, **decision.data)
    if decision.fails:
        raise StepFailed(decision.fails, retryable=False)
    try:
        return KINDS[kind].apply(ctx, decision)
    finally:
        ctx.state.facts = None  # an action may change the host: later ones read it afresh


def decide_and_apply(ctx: HostContext, spec: Any) -> StepResult:
    """One step on one host now, outside a run: its decision from fresh facts, applied."""
    decision = plan_gathered(ctx, [spec]).steps[0].decision
    return apply(ctx, str(spec.kind), decision)
