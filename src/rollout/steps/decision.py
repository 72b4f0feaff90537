"""What a step decides before it acts: Skip (and why) or an Action, from facts alone.

Each step kind has a pure `decide(facts, target, params) -> Skip | Action` beside its
`apply(ctx, action)`. The engine applies exactly the decisions, and --dry-run prints exactly
the same decisions: the skip rules live in one place.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass, field, replace
from enum import IntEnum
from importlib import resources
from pathlib import Path
from typing import Generic, TypeVar

from pydantic import BaseModel
from typing_extensions import TypeVar as DefaultedTypeVar

from rollout.bundle.release import Artifact as Artifact  # re-exported: steps import it here
from rollout.bundle.release import Release as Release
from rollout.config.inventory import Host
from rollout.config.playbook import Playbook
from rollout.config.render import render_runtime
from rollout.host.facts import HostFacts
from rollout.host.layout import Layout
from rollout.host.scripts.judge import stopped_daemon
from rollout.jsontypes import JSON, JSONObject
from rollout.readfile import read_text

T = TypeVar("T")
D = DefaultedTypeVar("D", covariant=True, default=object)
"""What an action's decision fixed (its detail); a bare `Action` is `Action[object]`."""


@dataclass(frozen=True)
class Target:
    """What one host should end up with: its settings and, in a rollout, the release."""

    host: Host
    layout: Layout
    settings: Playbook  # the playbook rendered for this host
    release: Release | None = None  # None: single steps, on whatever current points at
    pending: bool = False  # dry run: the release comes from a build not made yet

    @property
    def release_id(self) -> str | None:
        return self.release.id if self.release else None

    def template_context(self, **extra: JSON) -> JSONObject:
        release_id = self.release_id
        release_dir = self.layout.release_dir(release_id) if release_id else self.layout.current
        return self.settings.template_context(
            self.host, release_dir=release_dir, release_id=release_id, **extra
        )

    def render_template_file(self, builtin: str, path: Path | None, extra: JSONObject) -> str:
        """Render the user's template file if given, else rollout's built-in one."""
        if path is None:
            text = (resources.files("rollout") / "resources" / "templates" / builtin).read_text()
            where = None
        else:
            text = read_text(path, "config template")
            where = self.settings.location("daemon", "config_template")
        return render_runtime(text, self.template_context(**extra), where)


@dataclass(frozen=True)
class Skip:
    """Nothing to do, and why."""

    reason: str
    data: JSONObject = field(default_factory=dict)


@dataclass(frozen=True)
class Call:
    """One host call as data: the action's name in rollout.host.scripts.ops, its keyword
    arguments (JSON) and how long the controller gives it (None: the step's deadline)."""

    name: str
    kwargs: JSONObject = field(default_factory=dict)
    timeout: float | None = None
    runtime: tuple[str, ...] = ()  # kwargs only the run fills in (the stopped daemon's pid)

    def as_json(self) -> JSONObject:
        """The form the guard's recipe and ops.batch carry: {"call", "kwargs"}."""
        return {"call": self.name, "kwargs": dict(self.kwargs)}

    def as_record(self) -> JSONObject:
        """The call as the dry run's --json and the journal's host_call event give it."""
        return call_record(self.name, self.kwargs, self.runtime)

    def plus(self, **more: JSON) -> Call:
        """The same call with arguments only the run knows (the daemon it started)."""
        return replace(self, kwargs={**self.kwargs, **more})


def write_call(path: str, text: str, keep: str | None = None, if_changed: bool = True) -> Call:
    """ops.write_file: `path` replaced whole by `text` (0600, never through a link); `keep`:
    where the file it replaces is kept; `if_changed`: nothing written when it holds `text`."""
    kwargs: JSONObject = {"path": path, "text": text, "if_changed": if_changed}
    return Call("write_file", {**kwargs, "keep": keep} if keep else kwargs)


RECORD_CHARS = 200  # a longer text argument is recorded by its sha256 and length
EXPORTS = re.compile(r"export ([A-Za-z_][A-Za-z0-9_]*)=(?:'[^']*'|[^ ;]*); ")


def without_env(text: str) -> str:
    """A command with validate.env's values left out (`export NAME=...; `), never shown."""
    text = EXPORTS.sub(r"export \1=...; ", text)
    if re.search(r"export \w+=(?!\.\.\.; )", text):  # a quoting the rule missed
        return "<a command with validate.env: not shown>"
    return text


def call_record(name: str, kwargs: JSONObject, runtime: tuple[str, ...] = ()) -> JSONObject:
    """A host call, small and shown safely: validate.env's values left out, a long text
    argument (a file's content) as its sha256 and length."""
    def small(value: JSON) -> JSON:
        if not isinstance(value, str):
            return value
        if len(value) > RECORD_CHARS:  # a file's content: its hash, of the text masked
            shown = without_env(value)
            return {"sha256": hashlib.sha256(shown.encode()).hexdigest(), "chars": len(value)}
        return without_env(value)
    record: JSONObject = {"call": name, "kwargs": {k: small(v) for k, v in kwargs.items()}}
    return {**record, "runtime": list(runtime)} if runtime else record


@dataclass(frozen=True)
class Action(Generic[D]):
    """What the step will do: `summary` for people, the rest for its apply function."""

    summary: str
    params: BaseModel | None = None  # the kind's typed params (rollout.config.steps)
    detail: D = None  # type: ignore[assignment]  # what the decision fixed: the text to write...
    fails: str | None = None  # known to fail from the facts: apply changes nothing, says this
    calls: tuple[Call, ...] = ()  # the host calls its apply makes, worked out by its decide

    def params_as(self, kind: type[T]) -> T:
        """The params, of the type the step's apply expects (its decide made them)."""
        return _expect(self.params, kind, "params")

    def detail_as(self, kind: type[T]) -> T:
        """The detail, of the type the step's apply expects (its decide made it)."""
        return _expect(self.detail, kind, "detail")


def _expect(value: object, kind: type[T], what: str) -> T:
    if not isinstance(value, kind):  # a decide and its apply that disagree: a bug
        raise TypeError(f"an action's {what} is a {type(value).__name__}, not a {kind.__name__}")
    return value


Decision = Skip | Action


class Phase(IntEnum):
    """How far a host got in this run; its rollback is decided from this alone."""

    UNTOUCHED = 0  # nothing that serves changed
    STOPPED = 1  # the hold is set: the daemon may be down
    SWITCHED = 2  # current may point at the new release
    STARTED = 3  # the new release's daemon may be running
    VALIDATED = 4  # the new release passed its validation

    @property
    def label(self) -> str:
        return self.name.lower()


@dataclass
class Staged:
    """A release's executables staged on a host ahead of its batch, each verified as written
    (rollout.engine.staging), with their identities read right after."""

    release_id: str
    directory: str
    identities: dict[str, str]
    installed: bool = False  # the upload step renamed them into place


@dataclass(frozen=True)
class Stopped:
    """The stop's hand-off to the drain: the daemon it stopped (pid 0: none was)."""

    pid: int = 0
    starttime: int | None = None

    @classmethod
    def of(cls, report: JSON) -> Stopped:
        """From the stop's report, by the judge's rule (hostile data: wrong types are none)."""
        return cls(*stopped_daemon(report))


@dataclass(frozen=True)
class Started:
    """The start's hand-off to ready and validate: the daemon.pid line ("PID STARTTIME
    EXE") of the daemon it saw the supervisor start."""

    line: str

    @property
    def pid(self) -> str:
        return self.line.split()[0]


@dataclass(frozen=True)
class Verified:
    """The upload's hand-off to the switch: each executable's identity (size, inode,
    device, mtime, ctime) read right after this run verified and installed it, so that the
    switch checks it by one stat instead of a hash."""

    release_id: str
    identities: tuple[tuple[str, str], ...]  # (name, identity), sorted by name

    def of_release(self, release_id: str) -> dict[str, str] | None:
        return dict(self.identities) if release_id == self.release_id else None


@dataclass
class HostState:
    """What a host's steps learn as they run, for the steps after them (typed, per host).
    What one step hands to the next is a frozen value, replaced whole, never edited."""

    phase: Phase = Phase.UNTOUCHED
    stopped: Stopped | None = None  # the stop's hand-off to the drain
    started: Started | None = None  # the start's hand-off to ready and validate
    facts: HostFacts | None = None  # the facts the plan was decided from, until an action runs
    verified: Verified | None = None  # the upload's hand-off to the switch
    staged: Staged | None = None  # what staging ahead left for the upload step
    cordoned: bool = False  # this run ran the cordon command: the host's end uncordons it
