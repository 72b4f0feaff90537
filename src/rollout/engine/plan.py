"""A plan is plain data: which hosts, in which batches, through which steps, with what.

Loading a playbook and an inventory gives a plan; printing it is the dry run's outline.
Executing it (rollout.engine.run) is the only part that touches hosts.
"""

from __future__ import annotations

import getpass
import os
import socket
import time
import uuid
from dataclasses import dataclass, field

from rollout.config.batches import batches
from rollout.config.inventory import Host, Inventory
from rollout.config.playbook import Playbook
from rollout.config.steps import StepSpec
from rollout.jsontypes import JSONObject


def new_run_id() -> str:
    return time.strftime("%Y%m%d-%H%M%S") + "-" + uuid.uuid4().hex[:6]


@dataclass
class Plan:
    run_id: str
    playbook: Playbook
    hosts: list[Host]
    batches: list[list[str]]
    operator: str = field(default_factory=lambda: os.environ.get("USER") or getpass.getuser())
    controller: str = field(default_factory=socket.gethostname)
    refused: dict[str, str] = field(default_factory=dict)
    """Hosts the inventory names whose own source is hostile or unreadable: each ends
    failed with why, never touched; the rest of the fleet goes on."""
    _per_host: dict[str, Playbook] = field(default_factory=dict, repr=False)
    _by_name: dict[str, Host] = field(default_factory=dict, init=False, repr=False)

    @property
    def host_names(self) -> list[str]:
        return [h.name for h in self.hosts]

    @property
    def root(self) -> str:
        return self.playbook.release.root

    @property
    def version(self) -> str:
        return str(self.playbook.vars.get("version", ""))

    @property
    def controller_steps(self) -> list[StepSpec]:
        return self.playbook.steps_in("controller")

    @property
    def host_steps(self) -> list[StepSpec]:
        return self.playbook.steps_in("host")

    def host(self, name: str) -> Host:
        """The plan's host of this name (KeyError: none), from an index of the hosts made
        once: a scan of the fleet per context made a run's cost grow with its square."""
        if len(self._by_name) != len(self.hosts):
            self._by_name = {h.name: h for h in self.hosts}
        return self._by_name[name]

    def settings_for(self, name: str) -> Playbook:
        """The playbook rendered with this host's vars (cached; pure)."""
        if name not in self._per_host:
            self._per_host[name] = self.playbook.for_host(self.host(name))
        return self._per_host[name]

    def describe(self) -> JSONObject:
        return {
            "run_id": self.run_id,
            "playbook": str(self.playbook.path),
            "version": self.version,
            "operator": self.operator,
            "controller": self.controller,
            "batches": self.batches,
            "steps": [
                {"name": s.name, "kind": s.kind, "scope": s.scope}
                for s in self.playbook.steps
            ],
        }


def make_plan(
    playbook: Playbook, inventory: Inventory, limit: str | None, run_id: str | None = None
) -> Plan:
    hosts = inventory.select(limit)
    plan = Plan(
        run_id or new_run_id(),
        playbook,
        hosts,
        [[h.name for h in b] for b in batches(hosts, playbook.rolling.serial)],
        refused=inventory.refused_in(limit),
    )
    for host in hosts:
        plan.settings_for(host.name)  # renders now: template errors surface before any change
    return plan
