"""Whose answer did we get? The daemon's ports must be held by the daemon the start step saw
(or a child of it), and /status's uptime must fit inside that daemon's life."""

from __future__ import annotations

from typing import Any

from rollout.errors import StepFailed
from rollout.host.facts import tcp_port
from rollout.steps.base import HostContext
from rollout.steps.decision import Target

UPTIME_SLACK = 1.0  # seconds: rounding between /status's clock and /proc's


def expected_pid(ctx: HostContext) -> int | None:
    """The daemon the start step saw; else the one a trusted daemon.pid names."""
    known = ctx.state.started.pid if ctx.state.started else None
    if known is not None and str(known).isdigit():
        return int(known)
    daemon = ctx.facts().daemon
    return daemon.pid if daemon.running else None


def _owner_is(owner: dict[str, Any], pid: int) -> bool:
    return owner.get("pid") == pid or pid in (owner.get("ancestors") or [])


def _age(owner: dict[str, Any]) -> str:
    age = owner.get("age_secs")
    return f"up {age:g}s" if isinstance(age, (int, float)) else "age unknown"


def _who(owner: dict[str, Any]) -> str:
    return f"pid {owner.get('pid')}"


def identity_problem(
    port: int, owners: list[dict[str, Any]], pid: int | None, pid_age: float | None,
    uptime: Any,
) -> str | None:
    """Why the answer on `port` is not the started daemon's; None when it is."""
    if pid is None and not owners and uptime is None:
        return f"nothing answered on port {port}: the daemon is not running"
    if pid is None:
        held = f"held by pid {owners[0].get('pid')}" if owners else "answered"
        return f"the daemon is not running, yet port {port} {held}: not a daemon of ours"
    strangers = [o for o in owners if not _owner_is(o, pid)]
    if strangers:
        o = strangers[0]
        return (f"port answered by {_who(o)} (not the started daemon): port {port} is held "
                f"by pid {o.get('pid')} ({o.get('cmdline') or '?'}, {_age(o)}), "
                f"the started daemon is pid {pid}")
    if not owners:
        return (f"port answered by pid ? (not the started daemon): no process this host can "
                f"see listens on port {port}; the started daemon is pid {pid}")
    if pid_age is None:
        return f"port answered by {_who(owners[0])} (not the started daemon): pid {pid} is gone"
    if isinstance(uptime, (int, float)) and uptime > pid_age + UPTIME_SLACK:
        return (f"port answered by {_who(owners[0])} (not the started daemon): /status says up "
                f"{uptime:g}s, but daemon {pid} started {pid_age:g}s ago")
    return None


def ports_query(ctx: HostContext) -> tuple[list[int], int | None]:
    """(the daemon's TCP ports, the started daemon's pid): what ops.owners is asked."""
    return daemon_ports(ctx.target), expected_pid(ctx)


def daemon_ports(target: Target) -> list[int]:
    """The daemon's TCP ports: status, then gRPC."""
    daemon = target.settings.daemon
    return [p for p in (tcp_port(daemon.status_listen), tcp_port(daemon.listen)) if p]


def judge_ports(ports: list[int], pid: int | None, found: Any,
                status: dict[str, Any] | None) -> str:
    """Raise unless the ports script's answer `found` shows the TCP ports held by the started
    daemon (or its child) and /status's uptime fits its life; returns what was proved."""
    if not ports:
        return "no TCP port to check"
    found = found if isinstance(found, dict) else {}
    me = found.get("pid") or {}
    for i, port in enumerate(ports):
        owners = (found.get("ports") or {}).get(str(port)) or []
        uptime = (status or {}).get("uptime_secs") if i == 0 and status is not None else None
        problem = identity_problem(port, owners, pid, me.get("age_secs"), uptime)
        if problem:
            raise StepFailed(problem, retryable=False,
                             data={"port": port, "owners": owners, "started_pid": pid})
    return f"ports {', '.join(map(str, ports))} held by daemon {pid}"


def check_ports(ctx: HostContext, status: dict[str, Any] | None, found: Any) -> str:
    ports, pid = ports_query(ctx)
    return judge_ports(ports, pid, found, status)
