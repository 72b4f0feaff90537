"""The plan's hosts as the engine reaches them: a connection, and the context its steps get."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from functools import partial

from rollout.config.inventory import Host
from rollout.config.steps import StepSpec
from rollout.engine.plan import Plan
from rollout.errors import Location
from rollout.host.layout import Layout
from rollout.output.events import EventBus
from rollout.steps.base import HostContext
from rollout.steps.decision import Release
from rollout.transport.base import Transport

Connect = Callable[[Host], Transport]


@dataclass(frozen=True)
class Hosts:
    plan: Plan
    bus: EventBus
    connect_to: Connect

    def connect(self, name: str) -> Transport:
        return self.connect_to(self.plan.host(name))

    def context(self, name: str, transport: Transport, release: Release | None) -> HostContext:
        return HostContext(
            host=self.plan.host(name),
            transport=transport,
            layout=Layout(self.plan.root),
            settings=self.plan.settings_for(name),
            release=release,
            log=partial(self._note, name),
            emit=partial(self.bus.emit, host=name),
            run_id=self.plan.run_id,
        )

    def open(self, name: str) -> HostContext:
        """A context on a connection of its own (a lock's)."""
        return self.context(name, self.connect(name), None)

    @contextlib.contextmanager
    def on(self, name: str, held: Transport | None,
           release: Release | None = None) -> Iterator[HostContext]:
        """A context on `held` (a lock's connection) when given, else on a connection of its
        own, closed when the body ends."""
        transport = held if held is not None else self.connect(name)
        try:
            yield self.context(name, transport, release)
        finally:
            if held is None:
                transport.close()

    def where(self, spec: StepSpec) -> Location | None:
        """Where a step is in the playbook: its `when`, named by file:line when it fails."""
        steps = self.plan.playbook.steps
        # the playbook's own step object first: models compare field by field, slowly
        index = next((i for i, step in enumerate(steps) if step is spec), None)
        if index is None and spec in steps:  # a step made alike (a single step's)
            index = steps.index(spec)
        return None if index is None else self.plan.playbook.location("steps", index, "when")

    def _note(self, host: str, message: str) -> None:
        self.bus.emit("note", host=host, reason=message)
