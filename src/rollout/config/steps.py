"""Step declarations of a playbook: which step, in which order, with which retry policy."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from .durations import Seconds
from .sections import CommandField


class StepKind(StrEnum):
    BUILD = "build"
    EXTRACT = "extract"
    PREFLIGHT = "preflight"
    SUPERVISE = "supervise"
    UPLOAD = "upload"
    CONFIG = "config"
    STOP = "stop"
    DRAIN = "drain"
    SWITCH = "switch"
    START = "start"
    READY = "ready"
    VALIDATE = "validate"
    PRUNE = "prune"


CONTROLLER_KINDS = frozenset({StepKind.BUILD, StepKind.EXTRACT})
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


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, coerce_numbers_to_str=True)


class RetryPolicy(_Strict):
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


class NoParams(_Strict):
    """This kind takes no params."""


PreflightCheck = Literal[
    "files", "ownership", "space", "budget", "cpu", "gpus", "executables", "input"
]


class PreflightParams(_Strict):
    checks: list[PreflightCheck] | None = Field(
        default=None,
        description="The checks to run (default: all): files (no link where rollout writes, "
        "root-owned folders no one else may write), ownership (no daemon the supervisor "
        "does not own, no stranger on its ports), space, budget, cpu, gpus, executables "
        "(needs the release on the host: run it again after the upload), input.",
    )


class SuperviseParams(_Strict):
    launcher: str = Field(
        default="",
        description="Command words put before the daemon (`numactl -N 0 --`, or a script "
        "that ends in `exec \"$@\"`), from the playbook (its vars or --set): an inventory var "
        "may not set it (refused at load). The supervisor tracks the process that runs the "
        "daemon's executable: the launcher itself once it execs it, else its nearest "
        "descendant that does.",
    )


class StopParams(_Strict):
    signal: str | None = Field(
        default=None, description="Signal to stop with (daemon.stop_signal)."
    )
    grace: ParamSeconds | None = Field(
        default=None, ge=0, description="Seconds before SIGKILL (daemon.stop_grace)."
    )
    force: bool = Field(
        default=False, description="Stop even when the daemon already runs the release."
    )
    work: bool = Field(
        default=True,
        description="Cordon and wait for the work in flight before the stop (the `work` "
        "section); false: stop at once (`rollout stop --force`).",
    )


class DrainParams(_Strict):
    deadline: ParamSeconds | None = Field(
        default=None, gt=0, description="daemon.drain.deadline."
    )
    plateau: ParamSeconds | None = Field(default=None, gt=0, description="daemon.drain.plateau.")
    zombie_grace: ParamSeconds | None = Field(
        default=None, ge=0, description="daemon.drain.zombie_grace."
    )


class SwitchParams(_Strict):
    restore_config: bool = Field(
        default=False, description="Also bring back the config the release last ran with."
    )


class StartParams(_Strict):
    wait: ParamSeconds = Field(
        default=30, gt=0, description="Seconds for the supervisor to start the daemon."
    )


class ReadyParams(_Strict):
    timeout: ParamSeconds | None = Field(
        default=None, gt=0, description="Seconds for the status port (daemon.ready_timeout)."
    )


class ValidateParams(_Strict):
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


class PruneParams(_Strict):
    keep: int | None = Field(default=None, ge=1, description="Releases kept (release.keep).")


PARAMS: dict[StepKind, type[_Strict]] = {
    StepKind.BUILD: NoParams,
    StepKind.EXTRACT: NoParams,
    StepKind.PREFLIGHT: PreflightParams,
    StepKind.SUPERVISE: SuperviseParams,
    StepKind.UPLOAD: NoParams,
    StepKind.CONFIG: NoParams,
    StepKind.STOP: StopParams,
    StepKind.DRAIN: DrainParams,
    StepKind.SWITCH: SwitchParams,
    StepKind.START: StartParams,
    StepKind.READY: ReadyParams,
    StepKind.VALIDATE: ValidateParams,
    StepKind.PRUNE: PruneParams,
}
"""Each kind's params: an unknown or misspelt one is an error at load (file:line:key)."""


HOST_PHASES = ("untouched", "stopped", "switched", "started", "validated")
"""The phases a host goes through in a run, in order; a host's rollback is decided from the
phase it reached (rollout.engine.hostplan.rollback_plan)."""


@dataclass(frozen=True)
class KindRule:
    """Where a host step kind stands in a playbook, and what the engine must know of it.
    Declared once here (RULES); the engine's tables (rollout.engine.hostplan) derive from it."""

    phase: str | None  # the phase the host is in while it runs (None: anywhere)
    enters: str | None = None  # the phase a host is in as soon as an action of it begins
    reaches: str | None = None  # the phase a host reaches when an action of it succeeds
    needs: tuple[StepKind, ...] = ()  # kinds one of which must come before it
    after: tuple[StepKind, ...] = ()  # kinds that, where the playbook has them, come before it
    changes: bool = False  # it changes what a host runs or holds: preflight guards it
    by_evidence: bool = False  # skipped where the running daemon already passed validation


RULES: dict[StepKind, KindRule] = {
    StepKind.PREFLIGHT: KindRule("untouched"),
    StepKind.SUPERVISE: KindRule("untouched", changes=True),
    StepKind.UPLOAD: KindRule("untouched", changes=True),
    StepKind.STOP: KindRule("stopped", enters="stopped", changes=True),
    # drain waits for the memory of the daemon the stop stopped (its pid from the stop)
    StepKind.DRAIN: KindRule("stopped", needs=(StepKind.STOP,), changes=True),
    # the new config is written only once the old daemon is stopped (the guard armed): a run
    # refused or lost before the stop leaves the running release's config as it was
    StepKind.CONFIG: KindRule("stopped", after=(StepKind.STOP,), changes=True),
    # switch points current at the release the upload put on the host (and verified)
    StepKind.SWITCH: KindRule("switched", enters="switched", needs=(StepKind.UPLOAD,),
                              changes=True),
    StepKind.START: KindRule("started", enters="started", changes=True),
    # ready waits on the daemon the start saw the supervisor start
    StepKind.READY: KindRule("started", needs=(StepKind.START,), by_evidence=True),
    StepKind.VALIDATE: KindRule("validated", reaches="validated", by_evidence=True),
    StepKind.PRUNE: KindRule(None),
}
"""Each host step kind's phase and prerequisites: host steps run in phase order, each after
a step it needs (checked at load: step_order_problem)."""


def step_order_problem(steps: list[tuple[str, StepKind]]) -> tuple[int, str] | None:
    """(the index of the first host step out of order, why), or None when the host steps run
    in phase order and each comes after a step it needs. Controller kinds are not ranked."""
    seen: list[tuple[str, StepKind]] = []
    for index, (name, kind) in enumerate(steps):
        rule = RULES.get(kind)
        if rule is None:
            continue
        early = next((i for i, (_, k) in enumerate(seen) if kind in RULES[k].after), None)
        if early is not None:
            other, other_kind = seen[early]
            return _index_of(steps, other), (
                f"a {other_kind} step must come after the {kind} step {name!r} "
                f"(host steps run in the order {', '.join(HOST_PHASES)})")
        if rule.needs and not any(k in rule.needs for _, k in seen):
            wanted = " or ".join(str(k) for k in rule.needs)
            return index, (f"a {kind} step needs a step of kind {wanted} before it (host steps "
                           f"run in the order {', '.join(HOST_PHASES)})")
        later = _later_step(rule, seen)
        if later is not None:
            other, other_kind = later
            return index, (
                f"a {kind} step (phase {rule.phase}) cannot come after step {other!r} "
                f"({other_kind}, phase {RULES[other_kind].phase}): host steps run in phase "
                f"order {', '.join(HOST_PHASES)}"
            )
        seen.append((name, kind))
    return None


MOVED_AFTER: dict[StepKind, StepKind] = {StepKind.CONFIG: StepKind.STOP}
"""Orders an earlier release loaded and this one corrects with a warning (deprecated, never
broken): a step of the kind before the first step of the kind it must follow runs right
after that step."""


def corrected_order(steps: list[tuple[str, StepKind]]) -> tuple[list[int], list[tuple[int, int]]]:
    """The order the steps run in, as indexes into `steps` (MOVED_AFTER applied), and each
    step moved: its index and the index of the step it now follows."""
    order = list(range(len(steps)))
    moved: list[tuple[int, int]] = []
    for kind, anchor in MOVED_AFTER.items():
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


def _index_of(steps: list[tuple[str, StepKind]], name: str) -> int:
    return next(i for i, (n, _) in enumerate(steps) if n == name)


def _later_step(rule: KindRule, seen: list[tuple[str, StepKind]]) -> tuple[str, StepKind] | None:
    """The first step seen whose phase comes after `rule`'s."""
    if rule.phase is None:
        return None
    rank = HOST_PHASES.index(rule.phase)
    for name, kind in seen:
        phase = RULES[kind].phase
        if phase is not None and HOST_PHASES.index(phase) > rank:
            return name, kind
    return None


class StepSpec(_Strict):
    """One step of the rollout. Steps run in the order given."""

    name: str = Field(pattern=r"^[A-Za-z0-9._-]+$", description="Unique step name.")
    kind: StepKind = Field(
        description="What the step does: " + ", ".join(k.value for k in StepKind) + "."
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

    def typed_params(self) -> Any:
        """The params as the kind's model (checked at load: rollout.config.playbook)."""
        return PARAMS[self.kind].model_validate(self.params)

    @property
    def scope(self) -> Scope:
        """ "controller" for build and extract (run once), "host" for the others."""
        return "controller" if self.kind in CONTROLLER_KINDS else "host"
