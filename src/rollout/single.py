"""The single-step commands (drain, start, stop, validate) and the fleet status."""

from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from rollout.app import cache_dir, connect, default_playbook
from rollout.config.inventory import load_inventory
from rollout.config.playbook import load_playbook
from rollout.config.steps import StepSpec
from rollout.console import ConsoleSink, print_table
from rollout.engine import Engine
from rollout.errors import RolloutError
from rollout.events import EventBus, StepResult
from rollout.layout import Layout
from rollout.plan import Plan, make_plan
from rollout.steps.base import HostContext
from rollout.units import format_size


def _plan(hosts_file: str, playbook: str | None, limit: str | None) -> Plan:
    return make_plan(load_playbook(playbook or default_playbook()), load_inventory(hosts_file),
                     limit)


def _spec(plan: Plan, kind: str) -> StepSpec:
    for spec in plan.playbook.steps:
        if spec.kind.value == kind:
            return spec
    return StepSpec(name=kind, kind=kind)  # type: ignore[arg-type]


def run_steps(hosts_file: str, playbook: str | None, host: str,
              kinds: tuple[str, ...]) -> list[StepResult]:
    plan = _plan(hosts_file, playbook, host)
    bus = EventBus(plan.run_id)
    bus.subscribe(ConsoleSink())
    engine = Engine(plan, bus, connect, cache_dir())
    return engine.run_steps_on(host, [_spec(plan, k) for k in kinds])


def daemon_state(facts: dict[str, Any]) -> str:
    daemon = facts.get("daemon") or {}
    supervisor = facts.get("supervisor") or {}
    state = str(daemon.get("state") or "none")
    if supervisor.get("state") == "crash-looping":
        return "crash-looping"
    if state == "running":
        return "running"
    if state == "zombie":
        return "zombie"
    return "held" if facts.get("held") else "stopped"


def _host_row(plan: Plan, name: str) -> dict[str, Any]:
    try:
        transport = connect(plan.host(name))
    except RolloutError as e:
        return {"host": name, "state": "unreachable", "error": str(e)}
    try:
        ctx = HostContext(host=plan.host(name), transport=transport, layout=Layout(plan.root),
                          settings=plan.settings_for(name))
        facts = ctx.facts()
    finally:
        transport.close()
    memory = (facts.get("cgroup") or {}).get("memory") or {}
    daemon = facts.get("daemon") or {}
    return {"host": name, "state": daemon_state(facts), "pid": daemon.get("pid"),
            "release": facts.get("current_release"), "uptime_secs": daemon.get("uptime_secs"),
            "restarts_last_hour": facts.get("restarts_last_hour"),
            "memory_used": memory.get("usage"), "memory_limit": memory.get("limit"),
            "last_exit": facts.get("last_exit")}


def status(hosts_file: str, playbook: str | None, limit: str | None, as_json: bool) -> int:
    plan = _plan(hosts_file, playbook, limit)
    with ThreadPoolExecutor(max_workers=max(1, min(32, len(plan.host_names)))) as pool:
        rows = list(pool.map(lambda n: _host_row(plan, n), plan.host_names))
    if as_json:
        print(json.dumps(rows, indent=2, default=str))
    else:
        for row in rows:
            row["memory"] = (f"{format_size(row.get('memory_used'))} / "
                             f"{format_size(row.get('memory_limit'))}")
        print_table(rows, ["host", "state", "pid", "release", "memory"], "fleet status")
    return 0
