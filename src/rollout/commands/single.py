"""The single-step commands: drain, start, stop, validate on one host, under its lock: a
host a rollout holds is refused (exit 4, naming the holder); a lock that could not be taken
(the host unreachable, the lock script failed) fails the command with nothing done (exit 1).
A step that did not do what the command says (a stop that signalled nothing) is exit 1."""

from __future__ import annotations

from rollout.commands.fleet import cache_dir, connect, load_fleet, step_spec
from rollout.engine.locks import LockPolicy, holder_for
from rollout.engine.run import Engine, EngineOptions
from rollout.errors import UserError
from rollout.output.console import ConsoleSink
from rollout.output.events import EventBus, Status, StepResult


def run_steps(
    hosts_file: str, playbook: str | None, host: str, kinds: tuple[str, ...],
    lock_wait: float = 0.0, break_lock: bool = False, force: bool = False,
) -> list[StepResult]:
    """`force`: the stop waits for no work in flight (StopParams.work false)."""
    plan = load_fleet(hosts_file, playbook, host)
    if host in plan.refused:
        raise UserError(f"host {host} is refused: {plan.refused[host]}")
    bus = EventBus(plan.run_id)
    bus.subscribe(ConsoleSink())
    holder = holder_for(plan.run_id, plan.operator, plan.controller, f"single:{'+'.join(kinds)}")
    locks = LockPolicy(lock_wait, break_lock, plan.playbook.rolling.lock_stale_after)
    engine = Engine(plan, bus, connect, cache_dir(), EngineOptions(holder, locks))
    specs = [step_spec(plan, k) for k in kinds]
    if force:
        specs = [s.model_copy(update={"params": {**s.params, "work": False}})
                 if s.kind == "stop" else s for s in specs]
    return engine.run_steps_on(host, specs)


def not_done(results: list[StepResult]) -> list[str]:
    """Why the command did not do what it says: each failed step's reason, and a stop that
    left the daemon unsignalled because its pidfile is not trusted (it may run on)."""
    why = [r.reason for r in results if r.failed]
    why += [f"nothing was stopped: {r.reason}" for r in results
            if r.status is Status.SKIPPED and r.data.get("outcome") == "untrusted"]
    return why
