"""--dry-run: read facts, print each host's plan, change nothing anywhere."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from rollout.errors import RolloutError
from rollout.layout import Layout
from rollout.plan import Plan
from rollout.steps.base import HostContext
from rollout.transport.base import Transport
from rollout.units import format_size


def host_summary(facts: dict[str, Any]) -> str:
    daemon = facts.get("daemon") or {}
    memory = (facts.get("cgroup") or {}).get("memory") or {}
    return (
        f"release {facts.get('current_release') or 'none'}, daemon "
        f"{daemon.get('state') or 'none'}, memory {format_size(memory.get('usage'))} of "
        f"{format_size(memory.get('limit'))}"
    )


def dry_run(plan: Plan, connect: Callable[[Any], Transport]) -> None:
    print(f"plan {plan.run_id}: version {plan.version or '-'}, batches {plan.batches}")
    for spec in plan.controller_steps:
        print(f"  controller: {spec.name} ({spec.kind.value}) would run")
    for name in plan.host_names:
        try:
            transport = connect(plan.host(name))
        except RolloutError as e:
            print(f"  {name}: UNREACHABLE: {e}")
            continue
        try:
            ctx = HostContext(
                host=plan.host(name),
                transport=transport,
                layout=Layout(plan.root),
                settings=plan.settings_for(name),
            )
            print(f"  {name}: {host_summary(ctx.facts())}")
            for spec in plan.host_steps:
                print(f"    {spec.name} ({spec.kind.value}) would run")
        finally:
            transport.close()
