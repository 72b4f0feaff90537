"""What the release kinds share (rollout.steps.kinds: upload, switch, prune)."""

from __future__ import annotations

import re

from pydantic import BaseModel

from rollout.errors import StepFailed
from rollout.steps.base import HostContext
from rollout.steps.decision import Action, Release, Target

RELEASE_ID = re.compile(r"^[0-9a-f]{12}$")


def need_release(ctx: HostContext) -> Release:
    if ctx.release is None:
        raise StepFailed("no release to deploy: the extract step has not run", retryable=False)
    return ctx.release


NO_RELEASE = "no release to deploy: the extract step has not run"


def without_release(target: Target, params: BaseModel, what: str) -> Action:
    if target.pending:
        return Action(f"{what} the new build (its release is known after the build)", params)
    return Action(what, params, fails=NO_RELEASE)


