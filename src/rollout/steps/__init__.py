"""Step kinds: each decides from facts (Skip and why, or an Action), then applies the action."""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

from pydantic import BaseModel

from rollout.config.steps import (
    DrainParams,
    NoParams,
    PreflightParams,
    PruneParams,
    ReadyParams,
    StartParams,
    StopParams,
    SuperviseParams,
    SwitchParams,
    ValidateParams,
)
from rollout.host.facts import HostFacts
from rollout.steps import config, daemon, drain, preflight, release, validate
from rollout.steps.base import Apply, Decide
from rollout.steps.decision import Decision, Target

P = TypeVar("P", bound=BaseModel)


def decided(decide: Callable[[HostFacts, Target, P], Decision], params: type[P]) -> Decide:
    """A kind's decide for the table: its params checked to be the kind's own (the engine
    validates them with config.steps.PARAMS)."""

    def checked(facts: HostFacts, target: Target, given: BaseModel) -> Decision:
        if not isinstance(given, params):  # the table and PARAMS disagree: a bug
            raise TypeError(f"{decide.__name__} takes {params.__name__}, "
                            f"not {type(given).__name__}")
        return decide(facts, target, given)

    return checked


HOST_STEPS: dict[str, tuple[Decide, Apply]] = {
    "preflight": (decided(preflight.decide, PreflightParams), preflight.apply),
    "supervise": (decided(daemon.decide_supervise, SuperviseParams), daemon.supervise),
    "upload": (decided(release.decide_upload, NoParams), release.upload),
    "config": (decided(config.decide, NoParams), config.apply),
    "stop": (decided(daemon.decide_stop, StopParams), daemon.stop),
    "drain": (decided(drain.decide, DrainParams), drain.apply),
    "switch": (decided(release.decide_switch, SwitchParams), release.switch),
    "start": (decided(daemon.decide_start, StartParams), daemon.start),
    "ready": (decided(daemon.decide_ready, ReadyParams), daemon.ready),
    "validate": (decided(validate.decide, ValidateParams), validate.validate),
    "prune": (decided(release.decide_prune, PruneParams), release.prune),
}
"""Each host step kind: its pure decide(facts, target, params), and its apply(ctx, action)."""

CONTROLLER_STEPS = ("build", "extract")
