"""Step kinds: each decides from facts (Skip and why, or an Action), then applies the action."""

from __future__ import annotations

from rollout.steps import config, daemon, drain, preflight, release, validate
from rollout.steps.base import Apply, Decide

HOST_STEPS: dict[str, tuple[Decide, Apply]] = {
    "preflight": (preflight.decide, preflight.apply),
    "supervise": (daemon.decide_supervise, daemon.supervise),
    "upload": (release.decide_upload, release.upload),
    "config": (config.decide, config.apply),
    "stop": (daemon.decide_stop, daemon.stop),
    "drain": (drain.decide, drain.apply),
    "switch": (release.decide_switch, release.switch),
    "start": (daemon.decide_start, daemon.start),
    "ready": (daemon.decide_ready, daemon.ready),
    "validate": (validate.decide, validate.validate),
    "prune": (release.decide_prune, release.prune),
}
"""Each host step kind: its pure decide(facts, target, params), and its apply(ctx, action)."""

CONTROLLER_STEPS = ("build", "extract")
