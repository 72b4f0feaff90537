"""supervise: install the supervisor and its settings; (re)start it if either changed."""

from __future__ import annotations

import hashlib
import json
import shlex
from typing import NamedTuple

from pydantic import Field

from rollout.config.steps import KindRule, StrictParams
from rollout.errors import StepFailed
from rollout.host.facts import HostFacts, tcp_port
from rollout.host.reports import Report
from rollout.host.scripts import script_text
from rollout.output.events import StepResult, changed
from rollout.secrets import head
from rollout.steps.base import HostContext, Kind
from rollout.steps.daemon import serving, set_hold
from rollout.steps.decision import (
    Action,
    Decision,
    Skip,
    Target,
)


class SuperviseParams(StrictParams):
    launcher: str = Field(
        default="",
        description="Command words put before the daemon (`numactl -N 0 --`, or a script "
        "that ends in `exec \"$@\"`), from the playbook (its vars or --set): an inventory var "
        "may not set it (refused at load). The supervisor tracks the process that runs the "
        "daemon's executable: the launcher itself once it execs it, else its nearest "
        "descendant that does.",
    )


def supervisor_conf(target: Target, params: SuperviseParams) -> str:
    daemon = target.settings.daemon
    launcher = params.launcher  # from the playbook alone: never an inventory var
    ports = [p for p in (tcp_port(daemon.listen), tcp_port(daemon.status_listen)) if p]
    conf = {"daemon_args": f"-c {shlex.quote(daemon.config_path)}", "launcher": str(launcher),
            "ports": ports, "daemon_env": {"NO_COLOR": "1"}}  # cuzk colours its log unless NO_COLOR
    return json.dumps(conf, indent=2, sort_keys=True) + "\n"


def _sha256(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


class Supervision(NamedTuple):
    """What decide_supervise fixed for supervise: the supervisor's settings text, whether one
    runs, whether to set the hold first, and whether only its start-up registration is due."""

    conf: str
    alive: bool
    hold: bool
    register_only: bool


def decide(facts: HostFacts, target: Target, params: SuperviseParams) -> Decision:
    """Install the supervisor and its settings; (re)start it if either changed."""
    lay = target.layout
    conf = supervisor_conf(target, params)
    changed_files = facts.digest(lay.supervisor) != _sha256(script_text("supervisor")) or (
        facts.digest(lay.supervisor_conf) != _sha256(conf)
    )
    alive = facts.supervisor.alive
    onstart = str(target.host.vars.get("onstart_script") or "")
    unregistered = facts.registered is None or (onstart and onstart not in facts.registered)
    if alive and not changed_files and unregistered:
        return Action("register the running supervisor with the host's start-up mechanism",
                      params, Supervision(conf, alive, False, True))
    if alive and not changed_files:
        return Skip("supervisor running, script and settings unchanged")
    what = "restart the supervisor (script or settings changed)" if alive else "start it"
    # never start a daemon this run is about to stop: a hand-started one runs (adopt), or
    # a rollout will stop whatever a fresh supervisor would start now
    stops_later = (not alive and target.release_id is not None and not facts.daemon.running
                   and serving(facts, target) is None)
    hold = bool(facts.foreign_daemons) or stops_later
    if facts.foreign_daemons:
        what += " held: the daemon it does not own is stopped first (adopt)"
    elif hold:
        what += " held: this run starts the new release itself"
    return Action(f"install the supervisor; {what}", params, Supervision(conf, alive, hold, False))


def register(ctx: HostContext) -> str:
    """Register the supervisor with the host's start-up mechanism (ops.register: the
    on-start script the host var onstart_script names, else cron @reboot, else a systemd
    unit); how, or "none"."""
    onstart = str(ctx.host_vars.get("onstart_script") or "")
    report = Report.parse(ctx.call("register", root=ctx.layout.root, onstart=onstart))
    how = report.raw.get("how")
    if report.outcome == "refused":
        return f"none ({head(report.reason, 200)})"
    return how if isinstance(how, str) and how else "none"


def apply(ctx: HostContext, action: Action) -> StepResult:
    lay = ctx.layout
    conf, alive, hold, register_only = action.detail_as(Supervision)
    if register_only:
        how = register(ctx)
        return changed(f"supervisor running; start-up registration: {how}")
    made = Report.parse(ctx.call("make_folder", path=lay.state_dir))
    if made.outcome not in ("made", "kept"):
        raise StepFailed(f"could not make {lay.state_dir}: {made.reason}", retryable=False)
    if hold:
        set_hold(ctx)
    ctx.write_if_changed(lay.supervisor, script_text("supervisor"))
    ctx.write_if_changed(lay.supervisor_conf, conf)
    report = Report.parse(ctx.call("run_supervisor", root=lay.root, restart=alive))
    if report.outcome not in ("started", "restarted"):  # never one others could write
        raise StepFailed(f"could not start the supervisor: {report.reason}", retryable=False)
    registered = register(ctx)
    what = "restarted (script or settings changed)" if alive else "started"
    what += f"; start-up registration: {registered}"
    return changed(f"supervisor {what}{', held (adopting)' if hold else ''}")


KIND = Kind("supervise", SuperviseParams, KindRule("untouched", changes=True), place=20,
            decide=decide, apply=apply)
