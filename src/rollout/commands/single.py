"""The single-step commands: drain, start, stop, validate on one host, under its lock: a
host a rollout holds is refused (exit 4, naming the holder)."""

from __future__ import annotations

from rollout.commands.app import cache_dir, connect, load_fleet, step_spec
from rollout.engine.locks import LockPolicy, holder_for
from rollout.engine.run import Engine, EngineOptions
from rollout.output.console import ConsoleSink
from rollout.output.events import EventBus, StepResult


def run_steps(
    hosts_file: str, playbook: str | None, host: str, kinds: tuple[str, ...]
) -> list[StepResult]:
    plan = load_fleet(hosts_file, playbook, host)
    bus = EventBus(plan.run_id)
    bus.subscribe(ConsoleSink())
    holder = holder_for(plan.run_id, plan.operator, plan.controller, f"single:{'+'.join(kinds)}")
    locks = LockPolicy(stale_after=plan.playbook.rolling.lock_stale_after)
    engine = Engine(plan, bus, connect, cache_dir(), EngineOptions(holder, locks))
    return engine.run_steps_on(host, [step_spec(plan, k) for k in kinds])
