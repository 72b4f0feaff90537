"""ready: wait until the daemon holds its ports and its status port answers."""

from __future__ import annotations

from pydantic import Field

from rollout.config.steps import KindRule, ParamSeconds, StrictParams
from rollout.host.facts import HostFacts, tcp_port
from rollout.output.events import StepResult, ok
from rollout.steps.base import HostContext, Kind, judged
from rollout.steps.daemon import already_validated, daemon_log_tail, status_url
from rollout.steps.decision import (
    Action,
    Call,
    Decision,
    Target,
)
from rollout.steps.identity import check_ports, ports_query


class ReadyParams(StrictParams):
    timeout: ParamSeconds | None = Field(
        default=None, gt=0, description="Seconds for the status port (daemon.ready_timeout)."
    )


def decide(facts: HostFacts, target: Target, params: ReadyParams) -> Decision:
    skip = already_validated(facts, target)
    if skip is not None:
        return skip
    daemon = target.settings.daemon
    seconds = daemon.ready_timeout if params.timeout is None else params.timeout
    return Action(f"wait for {status_url(daemon.status_listen)} (up to {seconds:g}s)", params,
                  calls=ready_calls(target, float(seconds)))


def ready_calls(target: Target, seconds: float) -> tuple[Call, ...]:
    """ops.wait_ready: the gRPC port accepts, then the status port answers ("died": the
    daemon daemon.pid names died meanwhile), and the daemon itself holds its ports."""
    daemon = target.settings.daemon
    grpc, status = tcp_port(daemon.listen), tcp_port(daemon.status_listen)
    kwargs = {"status_url": status_url(daemon.status_listen) if status else "",
              "seconds": seconds, "grpc_url": _grpc_url(daemon.listen) if grpc else "",
              "pidfile": target.layout.daemon_pid, "ports": [p for p in (status, grpc) if p],
              "require_owner": True}
    return (Call("wait_ready", kwargs, seconds + 10, runtime=("pid",)),)


def _grpc_url(listen: str) -> str:
    return status_url(listen).removesuffix("/status") + "/"


def apply(ctx: HostContext, action: Action) -> StepResult:
    """The gRPC port is bound and the status port answers (never a log line: cuzk prints
    "ready, serving on" before it binds, and binds the status port before the gRPC one),
    held by the daemon started (its pid added here, for its age). Fails early if the daemon
    dies meanwhile."""
    _, pid = ports_query(ctx)
    calls = [c.plus(pid=pid) for c in action.calls]
    reports = ctx.run_calls(calls)  # the ports' owners in the same call
    died = bool(reports) and reports[-1].get("outcome") == "died"
    if reports and reports[-1].get("outcome") == "stranger":  # who holds the port, and why
        check_ports(ctx, None, reports[-1].get("owners"))  # not ours: raises in those words
    result = judged("ready", calls, reports, retryable=not died,
                    output=daemon_log_tail(ctx) if died else "")
    status = result.data.get("status")
    proved = check_ports(ctx, status if isinstance(status, dict) else None,
                         reports[-1].get("owners"))
    return ok(f"{result.reason}; {proved}", **result.data)


def undo(target: Target, facts: HostFacts, params: ReadyParams, to: str | None) -> Action:
    """A rollback's ready, with the playbook's daemon.ready_timeout."""
    seconds = float(target.settings.daemon.ready_timeout)
    return Action("rollback ready", ReadyParams(), calls=ready_calls(target, seconds))


KIND = Kind("ready", ReadyParams,
            # ready waits on the daemon the start saw the supervisor start
            KindRule("started", needs=("start",), by_evidence=True), place=90,
            decide=decide, apply=apply, undo=undo,
            undo_seconds=lambda settings: float(settings.daemon.ready_timeout) + 30)
