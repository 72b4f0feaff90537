"""Step kinds: each checks before it acts and returns a StepResult with its reason."""

from __future__ import annotations

from rollout.steps import config, daemon, drain, preflight, release, validate
from rollout.steps.base import StepFn

HOST_STEPS: dict[str, StepFn] = {
    "preflight": preflight.preflight,
    "supervise": daemon.supervise,
    "upload": release.upload,
    "config": config.config,
    "stop": daemon.stop,
    "drain": drain.drain,
    "switch": release.switch,
    "start": daemon.start,
    "ready": daemon.ready,
    "validate": validate.validate,
    "prune": release.prune,
}

CONTROLLER_STEPS = ("build", "extract")
