"""`rollout heal`: restart a dead supervisor on every host that needs one; that supervisor
then starts the current release unless the host is held. Idempotent (a live supervisor with
unchanged settings is left alone), under each host's lock, journaled like a rollout, and it
ends with a summary."""

from __future__ import annotations

from dataclasses import dataclass

from rollout.commands.diagnose import collect_host
from rollout.commands.fleet import cache_dir, connect, load_fleet, runs_dir, step_spec
from rollout.engine.locks import LockPolicy, holder_for
from rollout.engine.plan import Plan
from rollout.engine.run import Engine, EngineOptions
from rollout.output.console import ConsoleSink, print_table
from rollout.output.events import EventBus, JsonLinesSink

SERVING = ("serving", "held", "healthy")


@dataclass(frozen=True)
class Healed:
    host: str
    result: str  # healthy, serving, held, failed
    reason: str


def _engine(plan: Plan, bus: EventBus, lock_wait: float = 0.0,
            break_lock: bool = False) -> Engine:
    holder = holder_for(plan.run_id, plan.operator, plan.controller, "heal")
    locks = LockPolicy(lock_wait, break_lock, plan.playbook.rolling.lock_stale_after)
    return Engine(plan, bus, connect, cache_dir(), EngineOptions(holder, locks))


def heal_host(plan: Plan, engine: Engine, name: str) -> Healed:
    """supervise (skipped when the supervisor lives with unchanged settings), then, unless
    the host is held, ready: the daemon the supervisor started answers, proved ours."""
    before = collect_host(plan, name, light=True)
    if not before.reachable:
        return Healed(name, "failed", f"unreachable: {before.error}")
    was_alive = before.facts.supervisor.alive
    done = engine.run_steps_on(name, [step_spec(plan, "supervise")])
    sup = done[-1] if done else None
    if sup is None or sup.failed:
        return Healed(name, "failed", f"supervise: {sup.reason if sup else 'not run'}")
    if before.facts.held:
        cordoned = (f"; left cordoned (run {before.facts.cordoned}): `rollout start {name}` "
                    "starts it and uncordons it") if before.facts.cordoned else ""
        return Healed(name, "held", f"supervisor running; host held: no daemon started{cordoned}")
    ready = engine.run_steps_on(name, [step_spec(plan, "ready")])
    if not ready or ready[-1].failed:
        why = ready[-1].reason if ready else "not run"
        return Healed(name, "failed", f"supervisor running, daemon not ready: {why}")
    if was_alive and before.facts.daemon.running:
        return Healed(name, "healthy", "supervisor and daemon were running: nothing to do")
    return Healed(name, "serving", f"supervisor restarted; {ready[-1].reason}")


def heal(hosts_file: str, playbook: str | None, limit: str | None, lock_wait: float = 0.0,
         break_lock: bool = False) -> int:
    """Heal every host (in inventory order); 0 when each ends serving or held, else 1."""
    plan = load_fleet(hosts_file, playbook, limit)
    bus = EventBus(plan.run_id)
    bus.subscribe(JsonLinesSink.to_path(runs_dir() / f"{plan.run_id}.jsonl", durable=True))
    bus.subscribe(ConsoleSink())
    engine = _engine(plan, bus, lock_wait, break_lock)
    bus.emit("run_start", reason="heal", data={"hosts": list(plan.host_names)})
    results = [heal_host(plan, engine, name) for name in plan.host_names]
    for r in results:
        bus.emit("heal_result", host=r.host, status=r.result, reason=r.reason)
    failed = [r for r in results if r.result not in SERVING]
    bus.emit("run_end", status="failed" if failed else "ok",
             reason=f"heal: {len(results) - len(failed)}/{len(results)} hosts serving or held")
    print_table([{"host": r.host, "result": r.result, "reason": r.reason} for r in results],
                ["host", "result", "reason"], f"heal {plan.run_id}")
    return 1 if failed else 0
