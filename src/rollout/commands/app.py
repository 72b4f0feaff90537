"""Application services: what the commands do, wired from config, plan, engine and sinks.

The CLI (rollout.cli) parses flags and calls these; the engine never imports the CLI.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import IO, Any

from rollout.bundle.source import load_release, sets_with_version
from rollout.commands.build import build_bundle
from rollout.commands.dryrun import dry_run
from rollout.commands.fleet import (
    Used,
    announce,
    cache_dir,
    choose_playbook,
    connect,
    load_fleet_used,
    runs_dir,
)
from rollout.commands.fleet import load_fleet as load_fleet
from rollout.commands.fleet import step_spec as step_spec
from rollout.config.playbook import parse_set_options
from rollout.config.vastai import is_ref
from rollout.engine.locks import LockPolicy, holder_for
from rollout.engine.needs import refuse_incomplete
from rollout.engine.plan import Plan, new_run_id
from rollout.engine.run import Connect, Engine, EngineOptions, RunSummary
from rollout.errors import UserError
from rollout.output.console import ConsoleSink, print_summary
from rollout.output.events import EventBus, JsonLinesSink, open_private
from rollout.output.journal import journal_path
from rollout.output.resume import read_resumed
from rollout.reports.sinks import STEP_SUMMARY, report_sinks
from rollout.steps.image import ControllerContext
from rollout.steps.kinds import load_playbook


@dataclass(frozen=True)
class Outputs:
    """Where a run's events are rendered besides the console and the journal."""

    junit: str | None = None
    summary: str | None = None
    quiet: bool = False


@dataclass
class RolloutRequest:
    hosts: str
    playbook: str | None = None
    sets: tuple[str, ...] = ()
    limit: str | None = None
    dry_run: bool = False
    json_path: str | None = None
    verbose: bool = False
    lock_wait: float = 0.0
    break_lock: bool = False
    resume: str | None = None
    outputs: Outputs = field(default_factory=Outputs)
    release: str | None = None  # a bundle (folder or URL) built elsewhere: no build here
    adopt: bool = False  # --adopt: the setting preflight.adopt, whatever the playbook says

    def settings(self) -> dict[str, Any]:
        """The playbook settings the flags set (dotted keys), over the playbook's own."""
        return {"preflight.adopt": True} if self.adopt else {}

    def replayable(self) -> dict[str, Any]:
        """What a resumed run needs to rebuild the same plan."""
        return {
            "hosts": self.hosts if is_ref(self.hosts) else str(Path(self.hosts).resolve()),
            "limit": self.limit,
            "playbook": str(Path(self.playbook).resolve()) if self.playbook else None,
            "sets": list(self.sets),
            "release": _absolute_unless_url(self.release),
            "adopt": self.adopt,
        }


def _absolute_unless_url(ref: str | None) -> str | None:
    if ref is None or "://" in ref:
        return ref
    return str(Path(ref).resolve())


def load_plan(req: RolloutRequest, run_id: str | None = None, builds: bool = False) -> Plan:
    return load_plan_used(req, run_id, builds)[0]


def load_plan_used(req: RolloutRequest, run_id: str | None = None,
                   builds: bool = False) -> tuple[Plan, Used]:
    return load_fleet_used(
        req.hosts, req.playbook, req.limit, req.sets, run_id, req.settings(), builds
    )


@contextmanager
def json_stream(path: str | None) -> Iterator[IO[str] | None]:
    if path is None:
        yield None
    elif path == "-":
        yield sys.stdout
    else:
        with open_private(Path(path)) as f:
            yield f


def make_bus(
    plan: Plan, json_stream: IO[str] | None, verbose: bool, outputs: Outputs | None = None
) -> EventBus:
    outputs = outputs or Outputs()
    bus = EventBus(plan.run_id)
    bus.subscribe(JsonLinesSink.to_path(runs_dir() / f"{plan.run_id}.jsonl", durable=True))
    if json_stream is not None:
        bus.subscribe(JsonLinesSink(json_stream))
    for sink in report_sinks(outputs.junit, outputs.summary, os.environ.get(STEP_SUMMARY)):
        bus.subscribe(sink)
    bus.subscribe(ConsoleSink(verbose=verbose, quiet=outputs.quiet))
    return bus


@contextmanager
def interrupts(flag: threading.Event) -> Iterator[None]:
    """Ctrl-C: start no new hosts; hosts in flight go on to a safe point (validated, or
    back on their previous release), never left stopped or half switched."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def handler(signum: int, frame: Any) -> None:
        again = flag.is_set()
        flag.set()
        print(
            "\ninterrupt: "
            + ("still " if again else "no new hosts will start; ")
            + "finishing the hosts in flight so that none is left stopped; the run can be "
            "resumed with --resume",
            file=sys.stderr,
        )

    previous = signal.signal(signal.SIGINT, handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


def run_rollout(req: RolloutRequest, connect: Connect = connect) -> RunSummary:
    done: frozenset[str] = frozenset()
    if req.resume:
        req, done = resume_request(req)
    release = None
    if req.release:
        release = load_release(req.release, cache_dir())
        req = replace(req, sets=sets_with_version(req.sets, release))
    plan, used = load_plan_used(req, req.resume, builds=release is None)
    if release is not None and req.release:
        refuse_incomplete(plan, release, req.release)  # exit 2 before any host is touched
    if req.dry_run:
        return dry_run(plan, connect, cache_dir(), release, req.json_path)
    if release is None:
        require_docker(plan.playbook.build)
    holder = holder_for(plan.run_id, plan.operator, plan.controller, plan.version)
    options = EngineOptions(
        holder,
        LockPolicy(req.lock_wait, req.break_lock, plan.playbook.rolling.lock_stale_after),
        done,
        release=release,
        resumed=bool(req.resume),
    )
    with (
        json_stream(req.json_path) as stream,
        interrupts(options.interrupted),
    ):
        bus = make_bus(plan, stream, req.verbose, req.outputs)
        summary = Engine(plan, bus, connect, cache_dir(), options).run(
            {**req.replayable(), "used": used.as_json()}
        )
    print_summary(summary)
    return summary


def require_docker(build: Any) -> None:
    """A run that builds needs this machine's Docker engine: one that is down or missing is
    exit 3 (EnvironmentProblem) before any host is locked, not a failed build step (exit 1)."""
    ControllerContext(build, "", cache_dir()).docker().close()


def resume_request(req: RolloutRequest) -> tuple[RolloutRequest, frozenset[str]]:
    """The request of the journaled run, and the hosts it already validated."""
    assert req.resume is not None
    journal = journal_path(runs_dir(), req.resume)
    if not journal.exists():
        raise UserError(f"no journal {journal} for run {req.resume}")
    journaled = read_resumed(journal)  # each field's type checked: exit 2 at its line
    for warning in journaled.warnings:
        print(f"warning: {warning}", file=sys.stderr)
    old, done = journaled.request, journaled.validated
    resumed = replace(
        req,
        hosts=old["hosts"],
        playbook=old["playbook"],
        sets=tuple(old["sets"]),
        limit=old["limit"],
        release=old["release"],
        adopt=req.adopt or old["adopt"],
    )
    return resumed, done


def run_build(playbook: str | None, sets: tuple[str, ...], out: Path,
              verbose: bool = False) -> Any:
    """`rollout build`: build and extract on this machine, write the bundle to `out`."""
    chosen, source = choose_playbook(playbook)
    announce(Used(chosen, source))
    loaded = load_playbook(chosen, parse_set_options(sets))
    require_docker(loaded.build)
    bus = EventBus(new_run_id())
    bus.subscribe(JsonLinesSink.to_path(runs_dir() / f"{bus.run_id}.jsonl", durable=True))
    bus.subscribe(ConsoleSink(verbose=verbose))
    return build_bundle(loaded, out, bus, cache_dir())
