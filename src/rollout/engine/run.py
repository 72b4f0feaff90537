"""Execute a plan: controller steps once, then hosts in batches, each host at its own pace.

The Engine composes the units that each do one thing: the run's host locks (runlocks), the
hosts' connections and contexts (hosts), one step run with its events and retries
(stepper), the batches and their failure policy with staging ahead (batches), one host's
run with its guard's arming (hostrun, arming), what a failed step leads to (failures), the
revert after an abort (revert), and single steps outside a rollout (single).
"""

from __future__ import annotations

from functools import partial
from pathlib import Path

from rollout.config.steps import StepSpec
from rollout.engine.batches import Batches
from rollout.engine.hostrun import HostRun
from rollout.engine.hosts import Connect as Connect  # re-exported: commands import it here
from rollout.engine.hosts import Hosts
from rollout.engine.options import EngineOptions as EngineOptions
from rollout.engine.outcome import HostOutcome as HostOutcome
from rollout.engine.outcome import RunSummary as RunSummary
from rollout.engine.outcome import host_end
from rollout.engine.plan import Plan
from rollout.engine.revert import revert_done_hosts
from rollout.engine.runlocks import RunLocks
from rollout.engine.single import run_steps_on
from rollout.engine.stepper import StepRunner
from rollout.errors import LockHeld
from rollout.jsontypes import JSONObject
from rollout.output.events import EventBus, StepResult
from rollout.steps import image
from rollout.steps.decision import Release

PER_HOST = Release("per-host", "", "", ())


class Engine:
    def __init__(
        self,
        plan: Plan,
        bus: EventBus,
        connect: Connect,
        cache_dir: Path,
        options: EngineOptions | None = None,
    ) -> None:
        self.plan = plan
        self.bus = bus
        self.connect = connect
        self.cache_dir = cache_dir
        self.options = options or EngineOptions()
        self.hosts = Hosts(plan, bus, connect)
        self.steps = StepRunner(bus)
        self.locks = RunLocks(self.hosts, self.options.holder, self.options.locks)

    def run(self, request: JSONObject | None = None) -> RunSummary:
        """Run the plan; a run_end event closes every run, even one cut short by a bug."""
        self.bus.emit("run_start", data={**self.plan.describe(), "request": request or {}})
        summary = RunSummary(self.plan.run_id, {})
        try:
            with self.locks.held():
                self._locked_run(summary)
        except LockHeld as e:
            self.bus.emit("run_end", status="locked", reason=str(e), data={})
            raise
        except BaseException as e:
            summary.aborted = f"run cut short: {type(e).__name__}: {e}"
            self._run_end(summary)
            raise
        self._run_end(summary)
        return summary

    def _locked_run(self, summary: RunSummary) -> None:
        summary.release = PER_HOST if self.options.target else self._controller_steps()
        if summary.release is None:
            summary.aborted = "controller steps failed"
        else:
            run_host = HostRun(self.hosts, self.steps, self.locks, self.options)
            Batches(self.hosts, self.locks, self.options, run_host).run(summary.release, summary)
        if summary.aborted and self.plan.playbook.rolling.rollback_on_abort == "all":
            revert_done_hosts(self.hosts, summary, self.steps.run)

    def _run_end(self, summary: RunSummary) -> None:
        for name, why in self.plan.refused.items():  # its inventory source: never touched
            summary.outcomes[name] = host_end(self.bus, HostOutcome(name, "failed", why))
        refused = self.locks.refused
        for name in self.plan.host_names:  # one machine under two entries: why, even unreached
            if name in refused and name not in summary.outcomes:
                summary.outcomes[name] = host_end(self.bus, HostOutcome(name, "failed",
                                                                        refused[name]))
            summary.outcomes.setdefault(
                name, HostOutcome(name, "not_started", summary.aborted or "not reached")
            )
        self.bus.emit(
            "run_end",
            status="ok" if summary.exit_code == 0 else "failed",
            reason=summary.aborted,
            data={n: o.__dict__ for n, o in summary.outcomes.items()},
        )

    def _controller_steps(self) -> Release | None:
        given = self.options.release
        if given is not None:
            for spec in self.plan.controller_steps:
                self.steps.skip(None, spec, f"release {given.id} ({given.version}) comes from "
                                f"a bundle built elsewhere: nothing to build or extract")
            return given
        ctx = self.build()
        return None if ctx is None else ctx.release

    def build(self) -> image.ControllerContext | None:
        """The controller steps (build, extract) alone: what they made, None if one failed."""
        ctx = image.ControllerContext(self.plan.playbook.build, self.plan.version, self.cache_dir,
                                      emit=self.bus.emit)
        for spec in self.plan.controller_steps:
            fn = image.build if spec.kind == "build" else image.extract
            result = self.steps.run(None, spec, partial(fn, ctx, spec.params))
            if result.failed:
                return None
        return ctx

    def run_steps_on(self, name: str, specs: list[StepSpec]) -> list[StepResult]:
        """Run some steps on one host, outside a rollout (the single-step commands), under
        that host's lock like a rollout."""
        return run_steps_on(self.hosts, self.locks, self.steps, name, specs)
