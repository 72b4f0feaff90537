"""What a step gets to work with, and how it talks to its host."""

from __future__ import annotations

import json
import shlex
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel

from rollout.config.inventory import Host
from rollout.config.playbook import Playbook
from rollout.config.render import Command, render_command
from rollout.config.steps import KindRule
from rollout.errors import StepFailed
from rollout.host.facts import HostFacts, tcp_port
from rollout.host.layout import Layout, q
from rollout.host.scripts import bootstrap, script_text
from rollout.host.scripts.judge import verdict
from rollout.jsontypes import JSON, JSONObject
from rollout.output.events import Status, StepResult
from rollout.secrets import head, tail
from rollout.steps.decision import Action, Call, Decision, HostState, Target
from rollout.steps.decision import Artifact as Artifact  # re-exported: steps import them here
from rollout.steps.decision import Release as Release
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

    def call(self, action: str, call_timeout: float | None = None, **kwargs: JSON) -> JSONObject:
        """Call the host action ops.<action> (rollout.host.scripts.ops) with keyword
        arguments, within the step's deadline: its report, a JSON object (parse it with
        rollout.host.reports). StepFailed when the host gave none."""
        ahead = self.read_ahead.pop(_read_key(action, kwargs), None)
        if ahead is not None:
            return ahead
        what = f"ops.{action}"
        result = self._bounded(
            lambda left: self.transport.call(script_text("ops"), what, kwargs, left),
            call_timeout, what)
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
        return self.call(call.name, call_timeout=call.timeout, **call.kwargs)

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
        out = self.call("batch", call_timeout=60,
                        calls=[{"call": action, "kwargs": kwargs} for action, kwargs in reads])
        reports = out.get("reports")
        if not isinstance(reports, list) or len(reports) != len(reads):
            return  # each read is made on its own
        for (action, kwargs), report in zip(reads, reports, strict=True):
            if isinstance(report, dict) and report.get("outcome") != "bad-call":
                self.read_ahead[_read_key(action, kwargs)] = report

    def forget_reads(self) -> None:
        self.read_ahead.clear()

    def write_if_changed(self, path: str, text: str, keep_previous: str | None = None) -> bool:
        """Atomically replace a file whose content differs; `keep_previous` gets the old one.
        The text goes over stdin; the file and its kept copy are private (0600): a
        rendered config may hold secrets. Written by files.py, never through a link: a link
        in place of the file, its temporary or its kept copy fails the step, named."""
        keep = ["--keep", keep_previous] if keep_previous else []
        out = self.write_file(["write", path, "--if-changed", *keep], text)
        return bool(out.get("changed"))

    def write_file(self, args: list[str], text: str = "") -> JSONObject:
        """files.py ARGS on the host with `text` on its stdin (after the script itself):
        its JSON answer; StepFailed with its reason when it refused."""
        command = f"python3 -c {q(bootstrap('files.py'))} {shlex.join(args)}"
        result = self._bounded(  # in the host's agent where there is one: no python3 start
            lambda left: self.transport.run_script_fed(script_text("files"), "files.py", args,
                                                       text, left), None, command)
        try:
            out = json.loads(result.stdout.strip().splitlines()[-1])
        except (ValueError, IndexError) as e:
            raise StepFailed(f"files.py {args[0]} on host gave no JSON (exit "
                             f"{result.exit_code}): {tail(result.stderr.strip(), 400)}") from e
        if not isinstance(out, dict) or not out.get("ok"):
            why = out.get("refused") if isinstance(out, dict) else None
            raise StepFailed(f"refused to write {args[1]}: {why or 'no reason given'}",
                             retryable=False)
        return out

    def facts(self, *digests: str) -> HostFacts:
        """The host's facts, read fresh in one round trip; `digests`: files to hash too."""
        args = [a for path in digests for a in ("--digest", path)]
        daemon = self.settings.daemon
        for port in (tcp_port(daemon.listen), tcp_port(daemon.status_listen)):
            args += ["--port", str(port)] if port else []
        _, data = self.script("facts", "--root", self.layout.root, *args, timeout=30)
        return HostFacts.parse(data)


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
