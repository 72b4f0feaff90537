"""What the engine says of each host and of the run: a host's outcome (host_end), the run's
summary (run_end), and a failpoint's parking (parked)."""

from __future__ import annotations

from dataclasses import dataclass, field

from rollout import failpoints
from rollout.output.events import EventBus
from rollout.steps.decision import Release


@dataclass
class HostOutcome:
    host: str
    status: str  # validated, failed, rolled_back, skipped, locked, unreachable, not_started
    reason: str
    release: str | None = None
    steps: dict[str, str] = field(default_factory=dict)
    busy: bool = False  # skipped untouched: work in flight at the deadline (not a failure)
    kind: str = ""  # the failure's kind in rollout.failures.FAILURES, "" for none

    @property
    def succeeded(self) -> bool:
        return self.status == "validated"


@dataclass
class RunSummary:
    run_id: str
    outcomes: dict[str, HostOutcome]
    aborted: str | None = None
    release: Release | None = None
    dry_run: bool = False

    @property
    def exit_code(self) -> int:
        if self.dry_run:
            return 0
        ok = all(o.succeeded for o in self.outcomes.values())
        return 0 if ok and not self.aborted and self.outcomes else 1


def host_end(bus: EventBus, outcome: HostOutcome, cause: str | None = None) -> HostOutcome:
    """Say how a host ended (one host_end event); returns the outcome."""
    bus.emit(
        "host_end",
        host=outcome.host,
        status=outcome.status,
        reason=outcome.reason,
        data={"release": outcome.release, "cause": cause, "kind": outcome.kind or None},
    )
    return outcome


def park(bus: EventBus, failpoint: str, host: str | None = None) -> None:
    """Stop at `failpoint` when a test set it (rollout.failpoints), saying so first; with
    `host`, the point is that host's (`park-before-drain@lab-3`) and holds it alone."""

    def parked(name: str, go: str) -> None:
        bus.emit("parked", host=host, reason=f"failpoint {name}: parked until {go} exists",
                 data={"failpoint": name, "go": go})

    failpoints.park(failpoint, parked, host or "controller")
