"""Application services: what the commands do, wired from config, plan, engine and sinks.

The CLI (rollout.cli) parses flags and calls these; the engine never imports the CLI.
"""

from __future__ import annotations

import os
import re
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
from rollout.config.hostvar_checks import HostVarRefused
from rollout.config.inventory import Host, load_inventory
from rollout.config.playbook import DEFAULT_PLAYBOOK, parse_set_options
from rollout.config.project import source_of
from rollout.config.steps import StepSpec
from rollout.config.vastai import is_ref
from rollout.engine.locks import LockPolicy, holder_for
from rollout.engine.needs import refuse_incomplete
from rollout.engine.plan import Plan, make_plan, new_run_id
from rollout.engine.run import Connect, Engine, EngineOptions, RunSummary
from rollout.errors import ConfigError, Location, RolloutError, UserError
from rollout.output.console import ConsoleSink, print_summary
from rollout.output.escape import control_escaped
from rollout.output.events import EventBus, JsonLinesSink, open_private
from rollout.output.journal import journal_path
from rollout.output.resume import read_resumed
from rollout.reports.sinks import STEP_SUMMARY, report_sinks
from rollout.steps.image import ControllerContext
from rollout.steps.kinds import load_playbook
from rollout.transport.ssh import SshTransport

LOCAL_PLAYBOOK = Path("playbooks/rollout.yaml")
BUILT_IN = "built-in"


@dataclass(frozen=True)
class Used:
    """The playbook and the inventory a command used, and where each was named."""

    playbook: str
    playbook_from: str
    inventory: str | None = None
    inventory_from: str | None = None

    def line(self) -> str:
        text = f"playbook: {self.playbook} ({self.playbook_from})"
        if self.inventory is not None:
            text += f"; inventory: {self.inventory} ({self.inventory_from})"
        return control_escaped(text)

    def as_json(self) -> dict[str, str | None]:
        return {"playbook": self.playbook, "playbook_from": self.playbook_from,
                "inventory": self.inventory, "inventory_from": self.inventory_from}


def choose_playbook(given: str | None, named_by_inventory: Path | None = None,
                    inventory: str | None = None) -> tuple[str, str]:
    """The playbook (and where it was named): the one given (command line, environment or
    project file), else the inventory's own, else playbooks/rollout.yaml here, else the
    built-in real cuzk playbook."""
    if given:
        return str(given), source_of(given, "--playbook")
    if named_by_inventory is not None:
        return str(named_by_inventory), f"named by {inventory}"
    if LOCAL_PLAYBOOK.exists():
        return str(LOCAL_PLAYBOOK), "the working directory's playbooks/"
    return str(DEFAULT_PLAYBOOK), BUILT_IN


def announce(used: Used) -> None:
    """The line every command prints before it acts; a warning when no playbook was named
    and the built-in one is used for an inventory (it builds and proves real cuzk)."""
    print(used.line(), file=sys.stderr)
    if used.playbook_from == BUILT_IN and used.inventory is not None:
        print("warning: no playbook is named, so the built-in real cuzk playbook is used "
              "(curio's cuzk build, a porep-32g validation); name yours with --playbook, "
              "$ROLLOUT_PLAYBOOK, `playbook:` in rollout.yaml (`rollout init` writes one) or "
              "`playbook:` in the inventory", file=sys.stderr)


def runs_dir() -> Path:
    return Path(os.environ.get("ROLLOUT_RUNS_DIR", "runs"))


def cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "rollout" / "artifacts"


def connect(host: Host) -> SshTransport:
    transport = SshTransport(host)
    transport.open()  # a host that cannot be reached fails here, before any step
    return transport


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


def load_fleet(
    hosts_file: str,
    playbook: str | None = None,
    limit: str | None = None,
    sets: tuple[str, ...] = (),
    run_id: str | None = None,
    settings: dict[str, Any] | None = None,
    builds: bool = False,
) -> Plan:
    """Inventory and playbook, validated and rendered for each selected host (the line
    saying which each is printed first). The build section is read and checked only when
    `builds` (a command that builds); `settings` are the dotted playbook keys that flags
    set."""
    return load_fleet_used(hosts_file, playbook, limit, sets, run_id, settings, builds)[0]


def load_fleet_used(
    hosts_file: str,
    playbook: str | None = None,
    limit: str | None = None,
    sets: tuple[str, ...] = (),
    run_id: str | None = None,
    settings: dict[str, Any] | None = None,
    builds: bool = False,
) -> tuple[Plan, Used]:
    """load_fleet, and which playbook and inventory it used."""
    inventory = load_inventory(hosts_file)
    for skipped in inventory.skipped:
        print(f"warning: skipped {skipped}", file=sys.stderr)
    for name, why in inventory.refused.items():
        print(f"error: {name} is refused, the other hosts go on: {why}", file=sys.stderr)
    chosen, source = choose_playbook(playbook, inventory.playbook, hosts_file)
    used = Used(chosen, source, str(hosts_file), source_of(hosts_file, "--hosts"))
    announce(used)
    loaded = load_playbook(chosen, parse_set_options(sets), settings, builds)
    for warning in loaded.warnings:
        print(f"warning: {warning}", file=sys.stderr)
    try:
        return make_plan(loaded, inventory, limit, run_id), used
    except HostVarRefused as exc:
        raise ConfigError(exc.message, var_location(hosts_file, exc.host, exc.var)) from None


def var_location(hosts_file: str, host: str, var: str) -> Location:
    """Where an inventory var of a host is set (file:line), as `rollout inventory` says."""
    # for start-up time: the inventory's view (and the Ansible readers) only for a refusal
    from rollout.commands.inventory_view import describe

    try:
        source = str(describe(hosts_file).hosts[host]["sources"][f"vars.{var}"])
    except (RolloutError, KeyError):
        return Location(hosts_file, None, f"{host}: {var}")
    found = re.match(r"^(.*?):(\d+)(?:: .*)?$", source)
    if found is None:
        return Location(source, None, var)
    return Location(found.group(1), int(found.group(2)), var)


def load_plan(req: RolloutRequest, run_id: str | None = None, builds: bool = False) -> Plan:
    return load_plan_used(req, run_id, builds)[0]


def load_plan_used(req: RolloutRequest, run_id: str | None = None,
                   builds: bool = False) -> tuple[Plan, Used]:
    return load_fleet_used(
        req.hosts, req.playbook, req.limit, req.sets, run_id, req.settings(), builds
    )


def step_spec(plan: Plan, kind: str) -> StepSpec:
    """The playbook's step of this kind (its timeout and retry policy), else the defaults."""
    for spec in plan.playbook.steps:
        if spec.kind == kind:
            return spec
    return StepSpec(name=kind, kind=kind)


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
