"""How a run is asked to go: its locks, what a resumed run or a fleet rollback brings."""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field

from rollout.config.steps import StepSpec
from rollout.engine.locks import Holder, LockPolicy
from rollout.steps.base import HostContext
from rollout.steps.decision import Release


@dataclass
class EngineOptions:
    holder: Holder | None = None  # who takes the host locks; None: no locks
    locks: LockPolicy = field(default_factory=LockPolicy)
    done_hosts: frozenset[str] = frozenset()  # a resumed run: hosts already validated
    interrupted: threading.Event = field(default_factory=threading.Event)
    # A fleet rollback: each host's release found on the host, and the steps to run.
    target: Callable[[HostContext], Release] | None = None
    host_steps: list[StepSpec] | None = None
    # A release bundle built elsewhere (rollout.bundle): no build, no extract, no Docker.
    release: Release | None = None
    resumed: bool = False  # a resumed run (each command reports what the hosts' guards did)
