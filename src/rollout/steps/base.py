"""What a step gets to work with, and how it talks to its host."""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel

from rollout.config.inventory import Host
from rollout.config.playbook import Playbook
from rollout.config.render import Command, render_command
from rollout.config.steps import KindRule
from rollout.errors import StepFailed
from rollout.host.facts import HostFacts, tcp_port
from rollout.host.layout import Layout
from rollout.host.scripts import script_text
from rollout.host.scripts.judge import verdict
from rollout.jsontypes import JSON, JSONObject
from rollout.output.events import Status, StepResult
from rollout.secrets import head, tail
from rollout.steps.decision import Action, Call, Decision, HostState, Target, call_record
from rollout.steps.decision import Artifact as Artifact  # re-exported: steps import them here
from rollout.steps.decision import Release as Release
from rollout.steps.gather import Fact
from rollout.transport.base import RunResult, Transport, script_command


class StepTimeout(StepFailed):
    """A step ran past its deadline."""


@dataclass
class HostContext:
    """One host's connection, settings, and the state its steps leave for each other."""

    host: Host
    transport: Transport
    layout: Layout
    settings: Playbook  # the playbook rendered for this host
    release: Release | None = None
    state: HostState = field(default_factory=HostState)
    deadline: float | None = None
    log: Callable[[str], None] = lambda _msg: None
    tether: Callable[[], None] = lambda: None  # raises once the host's guard has the host
    emit: Callable[..., object] | None = None  # the run's events, this host's: emit(kind, **fields)
    run_id: str = ""  # the run this context acts for (the cordon's record names it)
    read_ahead: dict[str, JSONObject] = field(default_factory=dict)  # prefetch()'s reports

    @property
    def target(self) -> Target:
        return Target(self.host, self.layout, self.settings, self.release)

    @property
    def name(self) -> str:
        return str(self.host.name)

    @property
    def host_vars(self) -> JSONObject:
        return dict(self.host.vars)

    def template_context(self, **extra: JSON) -> JSONObject:
        return self.target.template_context(**extra)

    def render_command(self, template: Command, **extra: JSON) -> str:
        """Render a command (validate.command: a shell line, values quoted, or an argv list)
        for this host, validate.env's values passed as environment variables."""
        return render_command(
            template, self.settings.validation.env, self.template_context(**extra),
            self.settings.location("validate", "command"),
        )

    def remaining(self) -> float | None:
        if self.deadline is None:
            return None
        left = self.deadline - time.monotonic()
        if left <= 0:
            raise StepTimeout("step deadline passed", retryable=True)
        return left

    def sh(self, command: str, timeout: float | None = None, stdin: str | None = None) -> RunResult:
        return self._bounded(
            lambda left: self.transport.run(command, timeout=left, stdin=stdin), timeout, command
        )

    def _bounded(self, call: Callable[[float | None], RunResult], timeout: float | None,
                 what: str) -> RunResult:
        """One command within the step's deadline; a command that ran past it is a timeout."""
        self.tether()
        left = self.remaining()
        if left is not None:
            timeout = min(timeout, left) if timeout else left
        result = call(timeout)
        if result.exit_code == 124 and "(timed out)" in result.stderr:
            raise StepTimeout(f"timed out: {head(what, 80)}", retryable=True)
        return result

    def script(self, name: str, *args: object, timeout: float | None = None,
               before: str = "", own_process: bool = False) -> tuple[int, JSON]:
        """Run a host-side script from rollout.host.scripts; returns (exit code, parsed JSON).
        `before`: a shell command run first in the same round trip (the script runs only if
        it succeeds). `own_process`: a python3 of its own, its arguments in its command line
        for `ps` and `pkill -f` (a long download), never a fork of the host's agent."""
        result = self.run_script(name, *args, timeout=timeout, before=before,
                                 own_process=own_process)
        try:
            return result.exit_code, json.loads(result.stdout.strip().splitlines()[-1])
        except (ValueError, IndexError) as e:
            raise StepFailed(
                f"{name} on host gave no JSON (exit {result.exit_code}): "
                f"{tail((result.stderr or result.stdout).strip(), 400)}"
            ) from e

    def run_script(self, name: str, *args: object, timeout: float | None = None,
                   before: str = "", own_process: bool = False) -> RunResult:
        """A host script's result as it ran (see script()), its output not parsed."""
        if own_process:
            command = script_command([str(a) for a in args], before)
            return self.sh(command, timeout=timeout, stdin=script_text(name))
        return self.run_python(script_text(name), *args, timeout=timeout, before=before)

    def run_python(self, source: str, *args: object, timeout: float | None = None,
                   before: str = "") -> RunResult:
        """Python source run as `python3 - ARGS` would run it, through the host's agent
        where there is one."""
        argv = [str(a) for a in args]
        return self._bounded(lambda left: self.transport.run_script(source, argv, left, before),
                             timeout, script_command(argv, before))

    def call(self, action: str, call_timeout: float | None = None,
             runtime: tuple[str, ...] = (), beside: float | None = None,
             **kwargs: JSON) -> JSONObject:
        """Call the host action ops.<action> (rollout.host.scripts.ops) with keyword
        arguments, within the step's deadline: its report, a JSON object (parse it with
        rollout.host.reports). StepFailed when the host gave none. Each call is a host_call
        event (`runtime`: the kwargs only the run knew), so a run can be held to its plan.
        `beside`: seconds it may wait behind another call under way on the connection
        before it goes on a channel of its own (Transport.call_beside)."""
        self.record(action, kwargs, runtime)
        ahead = self.read_ahead.pop(_read_key(action, kwargs), None)
        return ahead if ahead is not None else self._call(action, call_timeout, kwargs, beside)

    def record(self, action: str, kwargs: JSONObject, runtime: tuple[str, ...] = ()) -> None:
        """A host call as a host_call event (small: long texts by their sha256)."""
        if self.emit is not None:
            self.emit("host_call", data=call_record(action, kwargs, runtime))

    def _call(self, action: str, call_timeout: float | None, kwargs: JSONObject,
              beside: float | None = None) -> JSONObject:
        what = f"ops.{action}"
        def send(left: float | None) -> RunResult:
            if beside is None:
                return self.transport.call(script_text("ops"), what, kwargs, left)
            return self.transport.call_beside(script_text("ops"), what, kwargs, left, beside)

        result = self._bounded(send, call_timeout, what)
        try:
            report = json.loads(result.stdout.strip().splitlines()[-1])
        except (ValueError, IndexError):
            report = None
        if not isinstance(report, dict):
            raise StepFailed(f"{what} on host gave no report (exit {result.exit_code}): "
                             f"{tail((result.stderr or result.stdout).strip(), 400)}")
        if report.get("outcome") == "bad-call":  # a bug in rollout: arguments that do not fit
            raise StepFailed(f"{what}: {head(str(report.get('reason')), 300)}",
                             retryable=False)
        return report

    def run_call(self, call: Call) -> JSONObject:
        """One host call of an action, within its own timeout: its report."""
        return self.call(call.name, call_timeout=call.timeout, runtime=call.runtime,
                         **call.kwargs)

    def run_calls(self, calls: Sequence[Call]) -> list[JSONObject]:
        """An action's host calls, in order: their reports."""
        return [self.run_call(c) for c in calls]

    def prefetch(self, reads: list[tuple[str, JSONObject]]) -> None:
        """Reads a step is about to make, in one round trip (ops.batch): each later call()
        of the same action with the same arguments takes its report from here, once. Only
        for reads nothing changes in between; forget_reads() drops them (a step's end, or
        once the step changed what they read)."""
        if len(reads) < 2:
            return
        batch = [{"call": action, "kwargs": kwargs} for action, kwargs in reads]
        out = self._call("batch", 60, {"calls": batch})  # each read recorded as it is used
        reports = out.get("reports")
        if not isinstance(reports, list) or len(reports) != len(reads):
            return  # each read is made on its own
        for (action, kwargs), report in zip(reads, reports, strict=True):
            if isinstance(report, dict) and report.get("outcome") != "bad-call":
                self.read_ahead[_read_key(action, kwargs)] = report

    def forget_reads(self) -> None:
        self.read_ahead.clear()

    def write(self, call: Call) -> bool:
        """A write_file call (decision.write_call): whether it changed the file; StepFailed
        with its reason when it refused."""
        report = self.run_call(call)
        if report.get("outcome") not in ("written", "unchanged"):
            raise StepFailed(f"refused to write {call.kwargs.get('path')}: "
                             f"{head(str(report.get('reason') or 'no reason given'), 300)}",
                             retryable=False)
        return report.get("outcome") == "written"

    def facts(self, *digests: str) -> HostFacts:
        """The host's facts, read fresh in one round trip (ops.facts; a read, not a host_call
        event); `digests`: files to hash too. StepFailed when the host gave no facts."""
        daemon = self.settings.daemon
        ports: list[JSON] = [p for p in (tcp_port(daemon.listen), tcp_port(daemon.status_listen))
                             if p]
        report = self._call("facts", 30, {"root": self.layout.root, "digests": list(digests),
                                          "ports": ports})
        if report.get("outcome") != "read":
            raise StepFailed(f"ops.facts on host gave no facts: "
                             f"{head(str(report.get('reason') or report), 300)}")
        return HostFacts.parse(report)


def judged(kind: str, calls: Sequence[Call], reports: list[JSONObject],
           retryable: bool = True, output: str = "") -> StepResult:
    """The step's result from its calls' reports, by the one judge (host/scripts/judge.py,
    the guard's too); StepFailed with its reason where it failed."""
    status, reason, data = verdict(kind, [c.as_json() for c in calls], list(reports))
    if status == "failed":
        raise StepFailed(reason, retryable=retryable, output=output, data=data)
    return StepResult(Status(status), reason, data)


def _read_key(action: str, kwargs: JSONObject) -> str:
    return f"{action} {json.dumps(kwargs, sort_keys=True)}"


Apply = Callable[[HostContext, Action], StepResult]
Decide = Callable[[HostFacts, Target, Any], Decision]
"""A step kind's decide: from the host's facts, the target and the kind's params."""
Undo = Callable[[Target, HostFacts, Any, "str | None"], Action]
"""How a kind runs in a rollback: (target, the plan's facts, the params of the plan's step
of this kind or the kind's defaults, the release to go back to) -> its action and calls."""
NeedsFacts = Callable[[Target, Any], list[Fact]]
"""The facts a kind's decide reads (rollout.steps.gather), from the target and its params:
gathered for the whole plan before any step is decided."""


@dataclass(frozen=True)
class Kind:
    """A host step kind, declared once in its module (rollout.steps.kinds.<name>)."""

    name: str
    params: type[BaseModel]  # its params, checked at load (file:line:key)
    rule: KindRule  # its place in the order, and what the engine must know of it
    place: int  # its place in the standard order (a playbook without steps)
    decide: Decide
    apply: Apply
    undo: Undo | None = None  # None: a rollback never runs it
    facts: NeedsFacts = lambda target, params: []  # noqa: E731 - the reads its decide needs
    undo_seconds: Callable[[Playbook], float] | None = None
    """The seconds its undo may take in a rollback, from the host's settings (None: no limit)."""
    not_redone: str = ""
    """Why a rollback after its own failure skips its undo (logged); empty: it runs it."""
    tolerated: bool = False
    """The guard's takeover goes on past a failed undo of it (reported)."""
    without_release: bool = False
    """Its undo runs even where there is no release to go back to (the host left held)."""
    checks_changes: bool = False
    """It checks a host before its changes: skipped where a plan changes nothing, its refusal
    of an untouched host skips the host (no rollback), and `rollout rollback` runs it too."""
    rollback_params: Mapping[str, Any] = field(default_factory=dict)
    """What `rollout rollback` adds to the params of the playbook's step of this kind."""
