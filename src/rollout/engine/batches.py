"""The batches in order, each host of a batch at its own pace, the later batches' hosts
staged ahead meanwhile; and the failure policy that ends a rollout between batches (a
failed canary, max_fail_percentage, an interrupt)."""

from __future__ import annotations

import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from contextlib import AbstractContextManager
from dataclasses import dataclass

from rollout.config.batches import max_fail_exceeded
from rollout.engine.hosts import Hosts
from rollout.engine.options import EngineOptions
from rollout.engine.outcome import HostOutcome, RunSummary
from rollout.engine.runlocks import RunLocks
from rollout.engine.staging import STAGING_WORKERS, Stager, staging
from rollout.engine.stepper import DEFAULT_STEP_TIMEOUT
from rollout.steps.base import HostContext
from rollout.steps.decision import Release

RunHost = Callable[[str, Release, Stager | None], HostOutcome]


@dataclass(frozen=True)
class Batches:
    hosts: Hosts
    locks: RunLocks
    options: EngineOptions
    run_host: RunHost

    def run(self, release: Release, summary: RunSummary) -> None:
        plan = self.hosts.plan
        later = [h for batch in plan.batches[1:] for h in batch
                 if h not in self.options.done_hosts
                 and self.locks.not_locked(h) is None]  # fmt: skip
        concurrency = plan.playbook.rolling.concurrency
        ahead = min(STAGING_WORKERS, concurrency // 2)  # staging's share of the bound
        with staging(release, self.hosts.bus, self._staging_host, later if ahead else [],
                     self._upload_timeout(), ahead) as stager:
            self._each(release, summary, stager, concurrency - (ahead if stager else 0))

    def _upload_timeout(self) -> float:
        """The upload step's timeout: what bounds a host's download when staged ahead."""
        specs = self.options.host_steps or self.hosts.plan.host_steps
        upload = next((s for s in specs if s.kind == "upload"), None)
        return float(upload.timeout or DEFAULT_STEP_TIMEOUT) if upload else DEFAULT_STEP_TIMEOUT

    def _staging_host(self, name: str) -> AbstractContextManager[HostContext]:
        """A context for staging on a host: on its lock's connection when there is one."""
        return self.hosts.on(name, self.locks.transport(name))

    def _each(self, release: Release, summary: RunSummary, stager: Stager | None,
              workers: int) -> None:
        plan = self.hosts.plan
        for index, batch in enumerate(plan.batches):
            if self.options.interrupted.is_set():
                summary.aborted = self._interrupted()
                return
            self.hosts.bus.emit("batch_start", data={"index": index, "hosts": batch})
            outcomes = self._work(batch, release, stager, workers)
            for outcome in outcomes:
                summary.outcomes[outcome.host] = outcome
            if len(outcomes) < len(batch):  # interrupted while some waited their turn
                summary.aborted = self._interrupted()
                return
            stop = self._stop_after(index, summary)
            if stop:
                summary.aborted = stop
                return
            pause = plan.playbook.rolling.pause_between_batches
            if pause and index + 1 < len(plan.batches):
                time.sleep(float(pause))

    def _work(self, batch: list[str], release: Release, stager: Stager | None, workers: int
              ) -> list[HostOutcome]:
        """The batch's hosts, `workers` at once (rolling.concurrency less staging's share: a
        host starts as another ends); after an interrupt, no host waiting its turn starts."""
        def one(name: str) -> HostOutcome | None:
            if self.options.interrupted.is_set():
                return None
            return self.run_host(name, release, stager)

        with ThreadPoolExecutor(max_workers=max(1, min(workers, len(batch))),
                                thread_name_prefix="host") as pool:
            return [o for o in pool.map(one, batch) if o is not None]

    def _interrupted(self) -> str:
        return (f"interrupted: no new hosts started; resume with "
                f"`rollout rollout --resume {self.hosts.plan.run_id}`")

    def _stop_after(self, index: int, summary: RunSummary) -> str | None:
        """Why the rollout stops after batch `index`; None: it goes on."""
        plan = self.hosts.plan
        rolling = plan.playbook.rolling
        failed = sum(1 for o in summary.outcomes.values() if not o.succeeded and not o.busy)
        if index == 0 and failed and len(plan.batches) > 1:
            return "canary batch failed: rollout stopped"
        if max_fail_exceeded(failed, len(plan.host_names), rolling.max_fail_percentage):
            return (f"{failed} failed host(s) exceed max_fail_percentage "
                    f"{rolling.max_fail_percentage}%")
        return None
