"""rollback_on_abort: all: when a rollout is cut short, the hosts that had reached the new
release go back too, each to the release it had (rollout.engine.recovery)."""

from __future__ import annotations

from rollout.engine.hostplan import plan_host
from rollout.engine.hosts import Hosts
from rollout.engine.outcome import HostOutcome, RunSummary, host_end
from rollout.engine.recovery import roll_back_host
from rollout.engine.stepper import RunStep
from rollout.errors import RolloutError
from rollout.steps.decision import Phase


def revert_done_hosts(hosts: Hosts, summary: RunSummary, run_step: RunStep) -> None:
    """Every validated host of `summary` reverted; its outcome replaced, and said."""
    for outcome in list(summary.outcomes.values()):
        if outcome.succeeded:
            summary.outcomes[outcome.host] = host_end(
                hosts.bus, _revert(hosts, outcome, summary, run_step))


def _revert(hosts: Hosts, outcome: HostOutcome, summary: RunSummary,
            run_step: RunStep) -> HostOutcome:
    name = outcome.host
    try:
        transport = hosts.connect(name)
    except RolloutError as e:
        return HostOutcome(name, "failed", f"revert after abort: unreachable: {e}",
                           outcome.release, outcome.steps)
    try:
        ctx = hosts.context(name, transport, summary.release)
        plan = plan_host(ctx.facts(), ctx.target, [])
        ctx.state.phase = Phase.VALIDATED  # the host validated the release in this run
        rolled = roll_back_host(ctx, plan.rollback_at(ctx.state.phase, None), run_step)
        status = "rolled_back" if rolled.ok else "failed"
        return HostOutcome(name, status, rolled.reason, rolled.release, outcome.steps)
    except RolloutError as e:
        return HostOutcome(name, "failed", f"revert after abort: {e}", outcome.release,
                           outcome.steps)
    finally:
        transport.close()
