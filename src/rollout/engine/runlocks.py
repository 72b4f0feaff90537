"""A run's host locks, seen from the engine: every host's lock taken before anything else,
held to the run's end, said as events; and which hosts the run may therefore touch."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from rollout.engine.hosts import Hosts
from rollout.engine.locks import (
    FleetLocks,
    FoundLock,
    Holder,
    LockEvents,
    LockPolicy,
    as_dict,
    fleet_locks,
    lock_order,
)
from rollout.engine.outcome import HostOutcome, park
from rollout.failures import host_status
from rollout.transport.base import Transport


class RunLocks:
    def __init__(self, hosts: Hosts, holder: Holder | None, policy: LockPolicy) -> None:
        self.hosts = hosts
        self.bus = hosts.bus
        self.holder = holder  # None: no locks
        self.policy = policy
        self.fleet: FleetLocks | None = None

    @contextlib.contextmanager
    def held(self) -> Iterator[None]:
        """Every host's lock, before the build and the first batch, held to the body's end."""
        if self.holder is None:
            yield
            return
        plan = self.hosts.plan
        names = [h.name for h in sorted(map(plan.host, plan.host_names), key=lock_order)]
        events = LockEvents(self._taken, self._broke, self._lost, self._unlockable, self._slow)
        with fleet_locks(names, self.hosts.open, self.holder, self.policy, events,
                         plan.playbook.rolling.concurrency) as locks:
            self.fleet = locks
            park(self.bus, "park-after-locks")
            try:
                yield
            finally:
                park(self.bus, "park-before-unlock")

    @property
    def refused(self) -> dict[str, str]:
        """Entries of one machine under two names: neither is touched, and why."""
        return self.fleet.refused if self.fleet else {}

    def transport(self, name: str) -> Transport | None:
        """The lock's connection to the host, when this run holds one."""
        held = self.fleet.held.get(name) if self.fleet else None
        return held.transport if held else None

    def keep(self, name: str) -> None:
        """The host is handed to its guard: its lock stays, naming this run."""
        if self.fleet is not None:
            self.fleet.keep(name)

    def not_locked(self, name: str) -> HostOutcome | None:
        """A host this run does not hold the lock of is never touched: its outcome."""
        locks = self.fleet
        if locks is None:
            return None
        if name in locks.refused:  # one machine under two entries: neither is touched
            return HostOutcome(name, "failed", locks.refused[name])
        if name in locks.unreachable:
            kind = locks.kinds.get(name, "")
            return HostOutcome(name, host_status(kind), locks.unreachable[name], kind=kind)
        if name in locks.lost:
            return HostOutcome(name, "locked", "its lock was broken by another run")
        return None

    def _taken(self, hosts: list[str]) -> None:
        holder = self.holder
        self.bus.emit(
            "locks_taken",
            reason=f"{len(hosts)} host lock(s) taken; held to the end of the run",
            data={"hosts": hosts, "holder": as_dict(holder) if holder else {}},
        )

    def _broke(self, found: FoundLock) -> None:
        self.bus.emit(
            "lock_broken",
            host=found.host,
            reason=f"broke the lock of {found.describe()} (--break-lock)",
            data={"holder": as_dict(found.holder), "age": found.age},
        )

    def _lost(self, other: FoundLock) -> None:
        self.bus.emit(
            "lock_lost",
            host=other.host,
            reason=f"our lock was broken and taken by {other.describe()}: "
            "no step of this run starts there any more",
            data={"holder": as_dict(other.holder)},
        )

    def _slow(self, host: str) -> None:
        self.bus.emit("note", host=host, reason="its lock's refresh waits for the call under "
                      "way on its connection; the other hosts' locks are refreshed meanwhile")

    def _unlockable(self, host: str, error: str) -> None:
        self.bus.emit("note", host=host, reason=f"not locked, left alone by this run: {error}")
