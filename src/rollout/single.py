"""The single-step commands: drain, start, stop, validate on one host."""

from __future__ import annotations

from rollout.app import cache_dir, connect, load_fleet, step_spec
from rollout.console import ConsoleSink
from rollout.engine import Engine
from rollout.events import EventBus, StepResult


def run_steps(
    hosts_file: str, playbook: str | None, host: str, kinds: tuple[str, ...]
) -> list[StepResult]:
    plan = load_fleet(hosts_file, playbook, host)
    bus = EventBus(plan.run_id)
    bus.subscribe(ConsoleSink())
    engine = Engine(plan, bus, connect, cache_dir())
    return engine.run_steps_on(host, [step_spec(plan, k) for k in kinds])
