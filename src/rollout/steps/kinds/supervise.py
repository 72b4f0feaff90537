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
from rollout.jsontypes import JSONObject
from rollout.output.events import StepResult, changed
from rollout.secrets import head
from rollout.steps.base import HostContext, Kind
from rollout.steps.daemon import serving
from rollout.steps.decision import (
    Action,
    Call,
    Decision,
    Skip,
    Target,
    write_call,
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
                      params, Supervision(conf, alive, False, True),
                      calls=(register_call(target),))
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
    how = Supervision(conf, alive, hold, False)
    return Action(f"install the supervisor; {what}", params, how, calls=install_calls(target, how))


def register_call(target: Target) -> Call:
    """ops.register: the on-start script the host var onstart_script names, else cron
    @reboot, else a systemd unit."""
    onstart = str(target.host.vars.get("onstart_script") or "")
    return Call("register", {"root": target.layout.root, "onstart": onstart})


def install_calls(target: Target, how: Supervision) -> tuple[Call, ...]:
    """The state folder, the hold where asked, the supervisor and its settings written where
    they differ, the supervisor (re)started, then registered."""
    lay = target.layout
    hold = (Call("hold", {"root": lay.root}),) if how.hold else ()
    return (Call("make_folder", {"path": lay.state_dir}), *hold,
            write_call(lay.supervisor, script_text("supervisor")),
            write_call(lay.supervisor_conf, how.conf),
            Call("run_supervisor", {"root": lay.root, "restart": how.alive}),
            register_call(target))


def registered(report: JSONObject) -> str:
    """How the supervisor was registered, or "none"."""
    parsed = Report.parse(report)
    how = parsed.raw.get("how")
    if parsed.outcome == "refused":
        return f"none ({head(parsed.reason, 200)})"
    return how if isinstance(how, str) and how else "none"


def apply(ctx: HostContext, action: Action) -> StepResult:
    how = action.detail_as(Supervision)
    *calls, register = action.calls
    for call in calls:
        _install(ctx, call)
    registration = f"start-up registration: {registered(ctx.run_call(register))}"
    if how.register_only:
        return changed(f"supervisor running; {registration}")
    what = "restarted (script or settings changed)" if how.alive else "started"
    what += f"; {registration}"
    return changed(f"supervisor {what}{', held (adopting)' if how.hold else ''}")


def _install(ctx: HostContext, call: Call) -> None:
    """One install call; StepFailed where it did not do its part."""
    if call.name == "write_file":
        ctx.write(call)
        return
    report = Report.parse(ctx.run_call(call))
    if call.name == "make_folder" and report.outcome not in ("made", "kept"):
        raise StepFailed(f"could not make {call.kwargs.get('path')}: {report.reason}",
                         retryable=False)
    if call.name == "run_supervisor" and report.outcome not in ("started", "restarted"):
        raise StepFailed(f"could not start the supervisor: {report.reason}", retryable=False)


KIND = Kind("supervise", SuperviseParams, KindRule("untouched", changes=True), place=20,
            decide=decide, apply=apply)
