"""The controller's side of one host's guard (rollout.engine.guard), through the host's run:
any guard left there waited for and shown first, its own started ahead, armed right before
the host's first change, told each phase, and settled when the controller is done with the
host; a tether dropped unsettled hands the host, and its lock, to the guard."""

from __future__ import annotations

from rollout.engine.guard import HostGuard, guards_left
from rollout.engine.hostplan import HostPlan
from rollout.engine.runlocks import RunLocks
from rollout.steps.base import HostContext
from rollout.steps.decision import Phase


class Arming:
    def __init__(self, run_id: str, locks: RunLocks, ctx: HostContext) -> None:
        self.run_id = run_id
        self.locks = locks
        self.ctx = ctx
        self.guard = HostGuard(run_id)
        ctx.tether = self.guard.check  # no command once the guard has the host

    def clear_left(self) -> None:
        """Any guard still at the host waited for, and what guards did there shown."""
        guards_left(self.ctx, self.locks.bus, self.run_id)

    def prepare(self, plan: HostPlan) -> None:
        self.guard.prepare(self.ctx, plan)

    def follow(self, plan: HostPlan, phase: Phase) -> None:
        """Armed before the host leaves untouched; then told each phase."""
        self.guard.follow(self.ctx, plan, phase)

    @property
    def lost(self) -> bool:
        return self.guard.lost

    def handed_over(self) -> str:
        return self.guard.handed_over()

    def settle(self) -> None:
        self.guard.settle()

    def given(self) -> str:
        """What a host's failure adds when its guard takes over."""
        guard = self.guard
        return "; the host's guard takes over" if guard.stream and not guard.settled else ""

    def close(self) -> None:
        """The tether closed; an unsettled guard takes over, under this run's lock, which
        stays on the host."""
        if self.guard.drop():
            self.locks.keep(self.ctx.name)
