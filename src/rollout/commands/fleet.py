"""Which inventory and playbook a command uses, and the plan they give: what every command
that reaches hosts shares (status, diagnose and the single steps need no more than this and
a connection; rollout.commands.app adds the run, the build and the bundles)."""

from __future__ import annotations

import os
import re
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rollout.config.hostvar_checks import HostVarRefused
from rollout.config.inventory import Host, load_inventory
from rollout.config.playbook import DEFAULT_PLAYBOOK, parse_set_options
from rollout.config.project import source_of
from rollout.config.steps import StepSpec
from rollout.engine.plan import Plan, make_plan
from rollout.errors import ConfigError, Location, RolloutError
from rollout.output.escape import control_escaped
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


def step_spec(plan: Plan, kind: str) -> StepSpec:
    """The playbook's step of this kind (its timeout and retry policy), else the defaults."""
    for spec in plan.playbook.steps:
        if spec.kind == kind:
            return spec
    return StepSpec(name=kind, kind=kind)


