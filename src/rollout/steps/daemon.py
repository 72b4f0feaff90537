"""What several daemon kinds share (rollout.steps.kinds: supervise, stop, start, ready, drain,
validate): the daemon's log, the hold, whether it serves the release, its status URL."""

from __future__ import annotations

from rollout.host.facts import HostFacts, ProcessFacts
from rollout.host.reports import TextReport
from rollout.steps.base import HostContext
from rollout.steps.decision import Skip, Target


def daemon_log_tail(ctx: HostContext, lines: int = 20) -> str:
    """The last lines of the daemon's log (ops.log_tail: never read through a link)."""
    return TextReport.parse(ctx.call("log_tail", root=ctx.layout.root, lines=lines)).text


def serving(facts: HostFacts, target: Target) -> Skip | None:
    """A skip when the daemon already runs the release being rolled out (no hold set)."""
    rid = target.release_id
    if rid and facts.serves(rid, target.layout.release_dir(rid)):
        return Skip(f"daemon {facts.daemon.pid} already runs release {rid}")
    return None


def status_url(status_listen: str) -> str:
    host, _, port = status_listen.rpartition(":")
    if host in ("0.0.0.0", "", "[::]", "::"):
        host = "127.0.0.1"
    return f"http://{host}:{port}/status"


def already_validated(facts: HostFacts, target: Target) -> Skip | None:
    """A skip when the daemon running now is the very process (pid and start time) that
    passed the validation of the release being rolled out: the evidence only that daemon
    could have produced. The plan keeps this skip only where nothing before it acts
    (engine.hostplan)."""
    rid = target.release_id
    if rid is None or target.pending:
        return None
    v = facts.validated_daemon(rid, target.layout.release_dir(rid))
    if v is None:
        return None
    return Skip(f"daemon {v.pid} (start time {v.starttime}) already passed the validation of "
                f"release {rid} ({target.layout.validated})",
                {"evidence": {"release": v.release, "pid": v.pid, "starttime": v.starttime,
                              "time": v.time}})


def cannot_adopt(p: ProcessFacts) -> str:
    """Why a daemon the supervisor does not own cannot be adopted: no start time to name it
    by (its pid alone may be reused). Preflight and the stop refuse it in these words."""
    return (f"cannot adopt daemon {p.describe()}: the host did not report its start time, so "
            "it cannot be named safely (a pid alone may be reused); stop it by hand, then rerun")
