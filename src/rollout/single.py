"""The single-step commands (drain, start, stop, validate) and the fleet status."""

from __future__ import annotations

from rollout import health
from rollout.app import cache_dir, connect, default_playbook
from rollout.config.inventory import load_inventory
from rollout.config.playbook import load_playbook
from rollout.config.steps import StepSpec
from rollout.console import ConsoleSink
from rollout.engine import Engine
from rollout.events import EventBus, StepResult
from rollout.plan import Plan, make_plan


def _plan(hosts_file: str, playbook: str | None, limit: str | None) -> Plan:
    return make_plan(
        load_playbook(playbook or default_playbook()), load_inventory(hosts_file), limit
    )


def _spec(plan: Plan, kind: str) -> StepSpec:
    for spec in plan.playbook.steps:
        if spec.kind.value == kind:
            return spec
    return StepSpec(name=kind, kind=kind)  # type: ignore[arg-type]


def run_steps(
    hosts_file: str, playbook: str | None, host: str, kinds: tuple[str, ...]
) -> list[StepResult]:
    plan = _plan(hosts_file, playbook, host)
    bus = EventBus(plan.run_id)
    bus.subscribe(ConsoleSink())
    engine = Engine(plan, bus, connect, cache_dir())
    return engine.run_steps_on(host, [_spec(plan, k) for k in kinds])


def status(
    hosts_file: str,
    playbook: str | None,
    limit: str | None,
    as_json: bool,
    min_capacity: float | None = None,
) -> int:
    """The fleet status (rollout.health): one row per host; 1 when capacity is too low."""
    return health.status(hosts_file, playbook, limit, as_json, min_capacity)
