"""Locks: every host's deploy lock, taken before anything changes and held to the run's end.

The lock lives on each host (``<root>/rollout/lock``, see the ops.lock action), so a second
rollout is refused whatever controller, checkout or inventory it runs from. A run takes
all its hosts' locks before its first batch: the first host in a fixed order (by address
and port, the same from any inventory) alone, then the others; two runs of one fleet
thus meet on that first host and exactly one goes on. A heartbeat rewrites each lock while
the run lasts; a lock whose heartbeat is older than ``stale_after`` (measured on the host)
is stale. A lock dated more than ``FUTURE_SLACK`` seconds ahead of its host's clock (the
clock stepped back, or a forged date) has an age nobody can measure, and a live holder's
next heartbeat would have dated it now: it counts as stale too, so it can always be broken
(a wait for it, ``--lock-wait``, ends at its deadline as any wait does). A stale lock, or
one that cannot be read as a holder (empty, cut, ``null``, ill-typed), is broken only when
asked (``--break-lock``), and the break is reported.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import shlex
import socket
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from typing import TypeVar

from rollout.config.inventory import Host
from rollout.config.sections import CONCURRENCY
from rollout.engine.openfiles import ensure_open_files
from rollout.errors import HostAnswerError, LockHeld, RolloutError, StepFailed, UserError
from rollout.failures import failure
from rollout.host.facts import HOST_ID_RE
from rollout.jsontypes import JSON, JSONObject
from rollout.steps.base import HostContext

HEARTBEATS_PER_STALE = 6  # a live holder refreshes its locks this often within stale_after
FUTURE_SLACK = 5.0  # seconds a lock's date may be ahead of its host's clock (a small step)
T = TypeVar("T")


@dataclass(frozen=True)
class Holder:
    run_id: str
    operator: str
    controller: str
    pid: int
    started: float
    version: str
    heartbeat: float | None = None  # the host's clock at the lock's last refresh

    def describe(self) -> str:
        age = time.time() - self.started
        return (
            f"run {self.run_id} by {self.operator} on {self.controller} (pid {self.pid}), "
            f"version {self.version or '-'}, started {age:.0f}s ago"
        )


_TYPES: dict[str, tuple[type, ...]] = {
    "run_id": (str,),
    "operator": (str,),
    "controller": (str,),
    "pid": (int,),
    "started": (int, float),
    "version": (str,),
    "heartbeat": (int, float, type(None)),
}


def parse_holder(text: str) -> Holder | str:
    """The holder a lock names, or why it names none (empty, cut, null, ill-typed)."""
    if not text.strip():
        return "the lock file is empty"
    try:
        doc = json.loads(text)
    except ValueError:
        return f"not rollout's lock ({len(text.encode())} bytes, not JSON)"  # never its bytes
    if not isinstance(doc, dict):
        return f"the lock file holds {json.dumps(doc)[:40]}, not a holder"
    for key, types in _TYPES.items():
        value = doc.get(key)
        if key not in doc and key != "heartbeat":
            return f"the lock file lacks {key}"
        if isinstance(value, bool) or not isinstance(value, types):
            return f"the lock file's {key} is {type(value).__name__}, not {types[0].__name__}"
    fields: JSONObject = {k: doc.get(k) for k in _TYPES}
    return Holder(**fields)


def _age(value: JSON) -> float:
    """A lock's age as the host reported it (hostile): a bad one (a string, NaN, 1e999, an
    int too large for a float) is no age."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return 0.0
    try:
        age = float(value)
    except OverflowError:
        return 0.0
    return max(0.0, age) if math.isfinite(age) else 0.0


def _holder_of(raw: JSONObject) -> Holder | str:
    """The holder the host's lock action found, or why none: its "problem" (a link, not
    JSON: said by the host, which never sends such text) comes first."""
    problem = raw.get("problem")
    if isinstance(problem, str) and problem:
        return problem[:300]
    return parse_holder(str(raw.get("text", ""))[:4000])


@dataclass(frozen=True)
class FoundLock:
    """Another holder's lock, as read on its host."""

    host: str
    holder: Holder | str  # str: why no holder could be read from it
    age: float  # seconds since its last heartbeat, on the host's clock
    sha256: str
    ahead: float = 0.0  # seconds its date is ahead of the host's clock

    @classmethod
    def read(cls, host: str, raw: JSONObject) -> FoundLock:
        return cls(host, _holder_of(raw), _age(raw.get("age")),
                   str(raw.get("sha256", ""))[:64], _age(raw.get("ahead")))

    @property
    def future(self) -> bool:
        """Dated ahead of the host's clock: its age cannot be measured (stale, by rule)."""
        return self.ahead > FUTURE_SLACK

    def breakable(self, stale_after: float) -> bool:
        return isinstance(self.holder, str) or self.future or self.age > stale_after

    def describe(self) -> str:
        if isinstance(self.holder, str):
            return f"an unknown holder ({self.holder})"
        if self.future:
            return (f"{self.holder.describe()}; its date is in the future ({self.ahead:.0f}s "
                    "ahead of the host's clock): its age cannot be measured")
        return f"{self.holder.describe()}; last heartbeat {self.age:.0f}s ago"


@dataclass(frozen=True)
class LockPolicy:
    wait: float = 0.0  # seconds to wait for a held lock
    break_stale: bool = False
    stale_after: float = 300.0  # a lock whose heartbeat is older than this is stale

    def __post_init__(self) -> None:
        if not (math.isfinite(self.wait) and self.wait >= 0):  # nan, inf: waits forever
            raise UserError(f"--lock-wait must be a finite number of seconds, 0 or more; "
                            f"got {self.wait}")

    @property
    def heartbeat(self) -> float:
        return max(0.2, self.stale_after / HEARTBEATS_PER_STALE)


def _lock_call(ctx: HostContext, do: str, me: Holder, expect: str | None = None,
               beside: float | None = None) -> JSONObject:
    """The host action ops.lock (rollout.host.scripts.actions.lock): its report. `beside`:
    seconds it may wait behind the host's step before it goes on a channel of its own."""
    mine: JSONObject = {k: v for k, v in asdict(me).items() if k != "heartbeat"}
    out = ctx.call("lock", call_timeout=60, beside=beside, root=ctx.layout.root, do=do,
                   holder=mine, expect=expect)
    denied = out.get("denied")
    if isinstance(denied, str) and denied:  # this user may not write the state folder
        error = failure(StepFailed, "path-denied", path=denied[:300], user=ctx.host.user)
        error.retryable = False
        raise error
    if out.get("refused"):  # a link in place of rollout/ or its guard
        raise StepFailed(f"{ctx.name}: lock refused: {str(out['refused'])[:400]}", retryable=False)
    return out


def _refusal(found: FoundLock, policy: LockPolicy) -> LockHeld:
    if found.future:
        hint = " Its date is in the future, so it never ages: --break-lock breaks it."
    elif found.breakable(policy.stale_after):
        hint = " It is stale or unreadable: --break-lock breaks it."
    else:
        hint = " Wait for it, or pass --lock-wait SECONDS."
    resume = _resume_hint(found.holder) if isinstance(found.holder, Holder) else ""
    return LockHeld(f"{found.host} is locked by {found.describe()}.{hint}{resume}")


NOT_RESUMABLE = ("heal", "single:", "rollback:")  # holder_for's versions of other commands


def _resume_hint(holder: Holder) -> str:
    """How a rollout's lock left by its stopped or dead controller is freed: --resume."""
    if holder.version.startswith(NOT_RESUMABLE):
        return ""
    run = holder.run_id  # from the host's lock file: quoted in the command it suggests
    gone = (f" Its controller (pid {holder.pid}) no longer runs on this machine."
            if holder.controller == socket.gethostname() and not _running(holder.pid) else "")
    return (f"{gone} If that controller was stopped or died, `rollout rollout --resume "
            f"{shlex.quote(run)}` (where runs/{run}.jsonl is) takes the locks over, finishes "
            "the run and frees them.")


def _running(pid: int) -> bool:
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except (ProcessLookupError, OverflowError):
        return False
    except PermissionError:  # alive, another user's
        return True
    return True


def take_host_lock(
    ctx: HostContext, me: Holder, policy: LockPolicy, on_break: Callable[[FoundLock], None]
) -> str:
    """Take this host's lock (or keep our own, for a resumed run); LockHeld names the holder.
    Returns the machine's host id, read (made at first contact) in the same round trip;
    HostAnswerError when the host could not give one."""
    deadline = time.monotonic() + policy.wait
    out = _lock_call(ctx, "take", me)
    while not out.get("ok"):
        found = FoundLock.read(ctx.name, out.get("lock") or {})
        if policy.break_stale and found.breakable(policy.stale_after):
            on_break(found)
            out = _lock_call(ctx, "break", me, found.sha256)
            continue
        if time.monotonic() >= deadline:
            raise _refusal(found, policy)
        time.sleep(min(2.0, max(0.1, deadline - time.monotonic())))
        out = _lock_call(ctx, "take", me)
    try:
        return _host_id(ctx.name, out)
    except HostAnswerError:  # taken, but this machine cannot be told apart: given back
        with contextlib.suppress(RolloutError):
            release_host_lock(ctx, me)
        raise


def _host_id(host: str, out: JSONObject) -> str:
    found = out.get("host_id")
    if isinstance(found, str) and HOST_ID_RE.fullmatch(found):
        return found
    why = out.get("host_id_error") or f"its lock script gave {ascii(found)[:40]}"
    raise HostAnswerError(f"{host}: cannot tell which machine this is: {str(why)[:300]!a}")


def same_machines(ids: dict[str, str]) -> dict[str, str]:
    """Inventory entries that reached one machine (the same host id): entry -> why it is
    refused, naming the other entries. Pure."""
    by_id: dict[str, list[str]] = {}
    for name, host_id in ids.items():
        by_id.setdefault(host_id, []).append(name)
    refused = {}
    for host_id, names in by_id.items():
        for name in names if len(names) > 1 else ():
            others = ", ".join(n for n in sorted(names) if n != name)
            refused[name] = (f"the same machine as inventory entry {others} (host id "
                             f"{host_id[:12]}...): refused before any change; list each "
                             "machine once")
    return refused


def refresh_host_lock(ctx: HostContext, me: Holder, wait: float = 0.0) -> FoundLock | None:
    """Rewrite our lock's heartbeat; the other holder's lock when ours was broken and taken.
    It never waits longer than `wait` seconds behind the host's step (a proof may outlast
    the lock's stale_after): past that, it goes on a channel of its own."""
    out = _lock_call(ctx, "refresh", me, beside=wait)
    if out.get("ok"):
        return None
    return FoundLock.read(ctx.name, out.get("lock") or {"text": "", "age": 0.0})


def release_host_lock(ctx: HostContext, me: Holder) -> None:
    _lock_call(ctx, "release", me)


def lock_order(host: Host) -> tuple[str, int, str]:
    """The same order from any inventory that names these hosts."""
    return (host.address, host.port, host.name)


@dataclass
class LockEvents:
    """What the fleet's locks report as they go (the engine turns them into events)."""

    taken: Callable[[list[str]], None]
    broken: Callable[[FoundLock], None]
    lost: Callable[[FoundLock], None]
    unreachable: Callable[[str, str], None]
    slow: Callable[[str], None] = lambda name: None  # its refresh waits for a call there


@dataclass
class FleetLocks:
    """The locks one run holds: a connection of their own per host, and a heartbeat."""

    me: Holder
    policy: LockPolicy
    events: LockEvents
    held: dict[str, HostContext] = field(default_factory=dict)
    unreachable: dict[str, str] = field(default_factory=dict)
    kinds: dict[str, str] = field(default_factory=dict)  # unreachable -> its failure's kind
    ids: dict[str, str] = field(default_factory=dict)  # entry -> its machine's host id
    refused: dict[str, str] = field(default_factory=dict)  # one machine under two entries
    lost: set[str] = field(default_factory=set)
    kept: set[str] = field(default_factory=set)  # handed to their guards: not given back
    workers: int = CONCURRENCY  # hosts' locks taken or given back at once (and see beat)
    _stop: threading.Event = field(default_factory=threading.Event)

    def keep(self, name: str) -> None:
        """A host handed over to its guard: its lock stays (naming this run) when the run
        ends, as a controller's death leaves it, so that the guard may act under it."""
        self.kept.add(name)

    def take(self, names: list[str], open_host: Callable[[str], HostContext]) -> None:
        """Every host's lock: the first reachable alone (where two runs of one fleet meet),
        then the rest at once. LockHeld names a holder."""
        rest = list(names)
        while rest and not self.held:
            refused = self._take_one(rest.pop(0), open_host)
            if refused is not None:
                raise refused
        refusals = [e for e in self._each(lambda n: self._take_one(n, open_host), rest) if e]
        if refusals:
            raise refusals[0]
        self._refuse_same_machines()
        self.events.taken(sorted(self.held))

    def _refuse_same_machines(self) -> None:
        """One machine, one entry: entries that share a host id are all refused, before
        anything changes there, and each one's lock given back through its own connection:
        a host id copied onto another machine (a cloned disk) is two locks, not one, and a
        release of a lock already given back is a no-op."""
        self.refused = same_machines({n: self.ids[n] for n in self.held})
        for name in sorted(self.refused):
            ctx = self.held.pop(name)
            try:
                with contextlib.suppress(RolloutError):
                    release_host_lock(ctx, self.me)
            finally:
                ctx.transport.close()
            self.events.unreachable(name, self.refused[name])

    def _take_one(self, name: str, open_host: Callable[[str], HostContext]) -> LockHeld | None:
        try:
            ctx = open_host(name)
        except RolloutError as e:  # left alone by this run: not locked, never touched
            self._unreachable(name, e)
            return None
        try:
            self.ids[name] = take_host_lock(ctx, self.me, self.policy, self.events.broken)
        except LockHeld as e:
            ctx.transport.close()
            return e
        except RolloutError as e:  # taken or not (an answer it could not read): given back
            try:
                with contextlib.suppress(RolloutError):
                    release_host_lock(ctx, self.me)
            finally:
                ctx.transport.close()
            self._unreachable(name, e)
            return None
        self.held[name] = ctx
        return None

    def _unreachable(self, name: str, error: RolloutError) -> None:
        self.unreachable[name] = str(error)
        self.kinds[name] = error.kind
        self.events.unreachable(name, self.unreachable[name])

    def _each(self, fn: Callable[[str], T], names: list[str]) -> list[T]:
        """fn of each host, `workers` at once."""
        with ThreadPoolExecutor(max_workers=max(1, min(self.workers, len(names))),
                                thread_name_prefix="locks") as pool:
            return list(pool.map(fn, names))

    def beat(self) -> None:
        """Refresh every lock until stopped: the sign of life a stale lock lacks. One pool for
        the run: a refresh goes over its host's connection and waits for the call under way
        there, so a host whose last refresh is still waiting is skipped (said once) and
        never holds up the others'. Its threads: one for each host at work (at most
        `workers`) and `workers` more for the rest."""
        waiting: dict[str, Future[None]] = {}
        said: set[str] = set()
        with ThreadPoolExecutor(max_workers=2 * max(1, self.workers),
                                thread_name_prefix="heartbeat") as pool:
            while not self._stop.wait(self.policy.heartbeat):
                for name in list(self.held):
                    last = waiting.get(name)
                    if last is not None and not last.done():
                        if name not in said:
                            said.add(name)
                            self.events.slow(name)
                        continue
                    said.discard(name)
                    waiting[name] = pool.submit(self._refresh, name)
            pool.shutdown(wait=True, cancel_futures=True)

    def _refresh(self, name: str) -> None:
        ctx = self.held.get(name)
        if ctx is None or self._stop.is_set():
            return
        with contextlib.suppress(RolloutError):  # a dropped link: the next beat retries
            other = refresh_host_lock(ctx, self.me, self.policy.heartbeat / 2)
            if other is not None and name not in self.lost:
                self.lost.add(name)
                self.events.lost(other)

    def release(self) -> None:
        """Give back every lock at once (a round trip each, in parallel)."""
        self._stop.set()

        def give_back(name: str) -> None:
            ctx = self.held[name]
            try:
                if name not in self.kept:
                    with contextlib.suppress(RolloutError):
                        release_host_lock(ctx, self.me)
            finally:
                ctx.transport.close()

        if self.held:
            self._each(give_back, list(self.held))
        self.held.clear()


@contextlib.contextmanager
def fleet_locks(
    names: list[str],
    open_host: Callable[[str], HostContext],
    me: Holder,
    policy: LockPolicy,
    events: LockEvents,
    workers: int = CONCURRENCY,
) -> Iterator[FleetLocks]:
    """Hold every named host's lock (names in lock_order) for the body, `workers` hosts at
    once; LockHeld when one is held by another run, after giving back those taken."""
    ensure_open_files(len(names), workers)  # a connection per locked host, for the run
    locks = FleetLocks(me, policy, events, workers=workers)
    heartbeat = threading.Thread(target=locks.beat, name="lock-heartbeat", daemon=True)
    try:
        locks.take(names, open_host)
        heartbeat.start()
        yield locks
    finally:
        locks._stop.set()
        if heartbeat.is_alive():
            heartbeat.join()
        locks.release()


def holder_for(run_id: str, operator: str, controller: str, version: str) -> Holder:
    return Holder(run_id, operator, controller, os.getpid(), time.time(), version)


def as_dict(holder: Holder | str) -> JSONObject:
    return asdict(holder) if isinstance(holder, Holder) else {"unknown": holder}
