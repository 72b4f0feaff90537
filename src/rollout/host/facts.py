"""Host facts as typed data: what the ops.facts action reported on a host, parsed in one place.

Everything read back from a host is hostile: a field of the wrong type becomes None (or its
empty default), never an exception and never code. The record fields (`last_exit`,
`last_start`) stay JSON objects: they are the supervisor's records, read by diagnose.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from rollout.host.layout import is_release_id
from rollout.host.scripts.common import format_size

HOST_ID_RE = re.compile(r"[0-9a-f]{32}")
MOST_READS = 64  # facts with arguments kept beside the base facts (rollout.steps.gather)


def fact_key(name: str, kwargs: Mapping[str, Any]) -> str:
    """A fact's name with its arguments, as one cache key."""
    return f"{name} {json.dumps(kwargs, sort_keys=True)}"


def _reads(raw: Any) -> dict[str, dict[str, Any]]:
    """Reports of facts with arguments, given as [{call, kwargs, report}]: by fact_key;
    an entry not of that shape is left out (each report is parsed where it is read)."""
    out = {}
    for entry in _list(raw)[:MOST_READS]:
        d = _dict(entry)
        name, kwargs, report = d.get("call"), d.get("kwargs"), d.get("report")
        if isinstance(name, str) and isinstance(kwargs, dict) and isinstance(report, dict):
            out[fact_key(name, kwargs)] = report
    return out


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _float(value: Any) -> float | None:
    """A finite number; None for anything else (a bool, NaN, an int too large for a float)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    try:
        number = float(value)
    except OverflowError:
        return None
    return number if math.isfinite(number) else None


def _str(value: Any) -> str | None:
    return value if isinstance(value, str) else None


def _bool(value: Any) -> bool:
    return value is True


def _dict(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def _port(key: Any) -> int | None:
    """A port number as a JSON key ("9820"); None for anything else ("²", "-1", "1e9")."""
    text = str(key)
    return int(text) if text.isascii() and text.isdigit() and len(text) <= 5 else None


def _release_id(value: Any) -> str | None:
    """A release id read back from a host: a folder name under releases/, or None."""
    return value if isinstance(value, str) and is_release_id(value) else None


def _host_id(value: Any) -> str | None:
    """A host id read back from a host (rollout.engine.identity): 32 lowercase hex, or None."""
    return value if isinstance(value, str) and HOST_ID_RE.fullmatch(value) else None


def _record(value: Any) -> dict[str, Any] | None:
    return value if isinstance(value, dict) else None


@dataclass(frozen=True)
class DaemonFacts:
    """The daemon named by daemon.pid. state: none (no pidfile), running, zombie or gone."""

    state: str = "none"
    pid: int | None = None
    starttime: int | None = None
    exe: str | None = None
    note: str | None = None
    started_at: float | None = None
    uptime_secs: float | None = None

    @classmethod
    def parse(cls, raw: Any) -> DaemonFacts:
        d = _dict(raw)
        return cls(
            state=_str(d.get("state")) or "none",
            pid=_int(d.get("pid")),
            starttime=_int(d.get("starttime")),
            exe=_str(d.get("exe")),
            note=_str(d.get("note")),
            started_at=_float(d.get("started_at")),
            uptime_secs=_float(d.get("uptime_secs")),
        )

    @property
    def running(self) -> bool:
        return self.state == "running"


@dataclass(frozen=True)
class SupervisorFacts:
    pid: int | None = None
    alive: bool = False
    state: str | None = None  # from supervisor.json: running, crash-looping, ...
    since: float | None = None
    updated: float | None = None  # its heartbeat: supervisor.json's last rewrite
    reason: str | None = None  # why it is in that state (blocked: who holds the port)

    @classmethod
    def parse(cls, raw: Any) -> SupervisorFacts:
        d = _dict(raw)
        return cls(
            pid=_int(d.get("pid")),
            alive=_bool(d.get("alive")),
            state=_str(d.get("state")),
            since=_float(d.get("since")),
            updated=_float(d.get("updated")),
            reason=_str(_dict(d.get("status")).get("reason")),
        )


def _text(value: Any, most: int) -> str:
    """A host's string for people: at most `most` characters, control characters (an ESC
    that would drive the operator's terminal) shown as '?'."""
    text = (_str(value) or "")[:most]
    return "".join(c if c.isprintable() else "?" for c in text)


def _size(value: Any) -> int | None:
    """A byte count a host reported: a non-negative int, else None."""
    number = _int(value)
    return number if number is not None and number >= 0 else None


@dataclass(frozen=True)
class Neighbour:
    """A process in the container that is not the daemon (a curio sidecar, the supervisor),
    and what it holds, in bytes."""

    pid: int
    cmdline: str = ""
    rss: int = 0
    anon: int | None = None
    file: int | None = None
    shmem: int | None = None

    @classmethod
    def parse(cls, raw: Any) -> Neighbour | None:
        d = _dict(raw)
        pid, rss = _int(d.get("pid")), _size(d.get("rss"))
        if pid is None or rss is None:
            return None
        return cls(pid, _text(d.get("cmdline"), 200), rss, _size(d.get("anon")),
                   _size(d.get("file")), _size(d.get("shmem")))

    def describe(self) -> str:
        kinds = [f"{k} {format_size(v)}" for k, v in (
            ("anon", self.anon), ("mapped file", self.file), ("shmem", self.shmem)) if v]
        held = ", ".join(kinds) if kinds else f"RSS {format_size(self.rss)}"
        return f"pid {self.pid} `{self.cmdline or '?'}` ({held})"


@dataclass(frozen=True)
class MemoryFacts:
    """The container's memory: the cgroup's usage and limit (bytes), and where they came from;
    the working set the drain measures (usage less the page cache no live process maps) and
    that page cache; what the container's other processes hold (neighbours_bytes, the
    biggest of them in neighbours), measured before any stop."""

    usage: int | None = None
    limit: int | None = None
    source: str | None = None
    meminfo_total: int | None = None  # /proc/meminfo: the HOST's RAM inside a container
    meminfo_available: int | None = None
    working_set: int | None = None
    page_cache: int | None = None  # what the working set leaves out
    neighbours_bytes: int | None = None  # None: not measured
    neighbours: tuple[Neighbour, ...] = ()

    @classmethod
    def parse(cls, cgroup: Any, meminfo: Any, others: Any = None) -> MemoryFacts:
        m = _dict(_dict(cgroup).get("memory"))
        info = _dict(meminfo)
        near = _dict(others)
        found = (Neighbour.parse(r) for r in _list(near.get("processes"))[:50])
        return cls(
            usage=_int(m.get("usage")),
            limit=_int(m.get("limit")),
            source=_str(m.get("source")),
            meminfo_total=_int(info.get("total")),
            meminfo_available=_int(info.get("available")),
            working_set=_size(m.get("working_set")),
            page_cache=_size(m.get("page_cache")),
            neighbours_bytes=_size(near.get("bytes")),
            neighbours=tuple(n for n in found if n is not None),
        )


@dataclass(frozen=True)
class ReleaseDir:
    """One folder under <root>/releases."""

    id: str
    mtime: float = 0.0
    has_daemon: bool = False
    has_bench: bool = False

    @classmethod
    def parse(cls, raw: Any) -> ReleaseDir | None:
        d = _dict(raw)
        name = _str(d.get("id"))
        if not name:
            return None
        return cls(name, _float(d.get("mtime")) or 0.0, _bool(d.get("has_daemon")),
                   _bool(d.get("has_bench")))


@dataclass(frozen=True)
class ValidatedFacts:
    """The evidence a validate step left on the host (<state>/validated.json): daemon `pid`,
    started at `starttime` (clock ticks since boot), passed the validation of `release`."""

    release: str
    pid: int
    starttime: int
    time: float | None = None

    @classmethod
    def parse(cls, raw: Any) -> ValidatedFacts | None:
        d = _dict(raw)
        release, pid, starttime = _release_id(d.get("release")), _int(d.get("pid")), _int(
            d.get("starttime"))
        if release is None or pid is None or starttime is None:
            return None
        return cls(release, pid, starttime, _float(d.get("time")))


def tcp_port(listen: str) -> int | None:
    """The TCP port of a listen address ("0.0.0.0:9821", "[::]:9820"); None for a unix
    socket, an empty (off) address or one without a port."""
    if not listen or listen.startswith("unix:"):
        return None
    port = listen.rpartition(":")[2]
    return int(port) if port.isdigit() else None


@dataclass(frozen=True)
class Parent:
    """One process of a daemon's parent chain: pid, program (the executable's name, or a
    Python script's) and command line, as the host reported them."""

    pid: int
    program: str = ""
    cmdline: str = ""
    shell: bool = False
    starts_cuzk: bool = False  # runs the daemon's program (ops.facts what_it_is)

    @classmethod
    def parse(cls, raw: Any) -> Parent | None:
        d = _dict(raw)
        pid = _int(d.get("pid"))
        if pid is None or pid < 1:
            return None
        return cls(pid, _text(d.get("program"), 100), _text(d.get("cmdline"), 300),
                   _bool(d.get("shell")),
                   _bool(d.get("starts_cuzk")))

    def describe(self) -> str:
        return f"pid {self.pid} (`{self.cmdline or self.program or '?'}`)"


@dataclass(frozen=True)
class ProcessFacts:
    """A cuzk daemon found on the host, or a process holding one of the daemon's ports,
    whoever started it. supervised: rollout's supervisor is its parent or ancestor."""

    pid: int
    ppid: int | None = None
    exe: str | None = None
    cmdline: str = ""
    age_secs: float | None = None
    started_at: float | None = None
    state: str = "running"
    supervised: bool = False
    starttime: int | None = None  # clock ticks since boot: with pid, names this process
    parents: tuple[Parent, ...] = ()  # its parent chain, nearest first (cuzk daemons only)

    @classmethod
    def parse(cls, raw: Any) -> ProcessFacts | None:
        d = _dict(raw)
        pid = _int(d.get("pid"))
        if pid is None:
            return None
        ancestors = [a for a in _list(d.get("ancestors")) if _int(a) is not None]
        found = (Parent.parse(r) for r in _list(d.get("parents"))[:16])
        return cls(pid, _int(d.get("ppid")) or (ancestors[0] if ancestors else None),
                   _str(d.get("exe")), _str(d.get("cmdline")) or "", _float(d.get("age_secs")),
                   _float(d.get("started_at")), _str(d.get("state")) or "running",
                   _bool(d.get("supervised")), _int(d.get("starttime")),
                   tuple(p for p in found if p is not None))

    def describe(self) -> str:
        up = f"up {self.age_secs:.0f}s" if self.age_secs is not None else "uptime unknown"
        return f"pid {self.pid} ({self.cmdline or self.exe or '?'}; {up}; parent {self.ppid})"


def _processes(raw: Any) -> tuple[ProcessFacts, ...]:
    found = (ProcessFacts.parse(r) for r in raw if isinstance(r, dict)) if isinstance(
        raw, list) else ()
    return tuple(p for p in found if p is not None)


def _port_owners(raw: Any) -> dict[int, tuple[ProcessFacts, ...]]:
    ports = ((_port(k), v) for k, v in _dict(raw).items())
    return {port: _processes(v) for port, v in ports if port is not None}


@dataclass(frozen=True)
class HostFacts:
    """One host as it was when the facts were read (one round trip, the ops.facts action)."""

    time: float | None = None
    root: str | None = None
    hostname: str | None = None
    python: str | None = None
    memory: MemoryFacts = field(default_factory=MemoryFacts)
    daemon: DaemonFacts = field(default_factory=DaemonFacts)
    supervisor: SupervisorFacts = field(default_factory=SupervisorFacts)
    held: bool = False
    current_release: str | None = None
    previous_release: str | None = None  # what current pointed at before the last switch
    releases: tuple[ReleaseDir, ...] = ()  # oldest first
    free_bytes: int | None = None
    root_writable: bool = False
    last_exit: dict[str, Any] | None = None
    last_start: dict[str, Any] | None = None
    restarts_last_hour: int | None = None
    exits_last_hour: int | None = None
    exit_counts_complete: bool | None = None
    restarts_total: int | None = None  # unheld exits since exits.jsonl began (a counter)
    digests: dict[str, str | None] = field(default_factory=dict)  # path: sha256 (its digests)
    validated: ValidatedFacts | None = None  # which daemon passed which release's validation
    registered: str | None = None  # how a restart brings the supervisor back (none: nothing)
    cuzk: tuple[ProcessFacts, ...] = ()  # every cuzk daemon on the host, whatever its parent
    port_owners: dict[int, tuple[ProcessFacts, ...]] = field(default_factory=dict)  # its ports
    cuzk_loops: tuple[Parent, ...] = ()  # shells that start cuzk, outside any SSH session
    errors: dict[str, str] = field(default_factory=dict)
    host_id: str | None = None  # <root>/rollout/host-id: what this machine is (read, not made)
    cordoned: str | None = None  # the run whose cordon is not undone (<root>/rollout/cordoned.json)
    reads: dict[str, dict[str, Any]] = field(default_factory=dict)  # gathered facts (fact_key)

    @classmethod
    def parse(cls, raw: Any) -> HostFacts:
        """The one parser of ops.facts's report (its outcome and reason are not read)."""
        d = _dict(raw)
        releases = (ReleaseDir.parse(r) for r in _list(d.get("releases")) if isinstance(r, dict))
        complete = d.get("exit_counts_complete")
        return cls(
            time=_float(d.get("time")),
            root=_str(d.get("root")),
            hostname=_str(d.get("hostname")),
            python=_str(d.get("python")),
            memory=MemoryFacts.parse(d.get("cgroup"), d.get("meminfo"), d.get("neighbours")),
            daemon=DaemonFacts.parse(d.get("daemon")),
            supervisor=SupervisorFacts.parse(d.get("supervisor")),
            held=_bool(d.get("held")),
            current_release=_release_id(d.get("current_release")),
            previous_release=_release_id(d.get("previous_release")),
            releases=tuple(r for r in releases if r is not None),
            free_bytes=_int(_dict(d.get("disk")).get("free_bytes")),
            root_writable=_bool(d.get("root_writable")),
            last_exit=_record(d.get("last_exit")),
            last_start=_record(d.get("last_start")),
            restarts_last_hour=_int(d.get("restarts_last_hour")),
            exits_last_hour=_int(d.get("exits_last_hour")),
            exit_counts_complete=complete if isinstance(complete, bool) else None,
            restarts_total=_int(d.get("restarts_total")),
            digests={str(k): _str(v) for k, v in _dict(d.get("digests")).items()},
            validated=ValidatedFacts.parse(d.get("validated")),
            registered=_str(d.get("registered")),
            cordoned=(_str(d.get("cordoned")) or "")[:128] or None,
            cuzk=_processes(d.get("cuzk_processes")),
            port_owners=_port_owners(d.get("port_owners")),
            cuzk_loops=tuple(p for p in (Parent.parse(r) for r in _list(
                d.get("cuzk_loops"))[:16]) if p is not None),
            errors={str(k)[:200]: str(v)[:500] for k, v in _dict(d.get("errors")).items()},
            host_id=_host_id(d.get("host_id")),
            reads=_reads(d.get("reads")),
        )

    def read(self, name: str, kwargs: Mapping[str, Any]) -> dict[str, Any] | None:
        """A gathered fact's report (hostile: parse it), or None where it was not gathered."""
        return self.reads.get(fact_key(name, kwargs))

    @property
    def foreign_daemons(self) -> tuple[ProcessFacts, ...]:
        """cuzk daemons running that rollout's supervisor did not start (hand-started)."""
        return tuple(p for p in self.cuzk
                     if not p.supervised and not self.ours(p.pid) and p.state != "zombie")

    def ours(self, pid: int) -> bool:
        """The daemon a trusted daemon.pid names (its supervisor may be gone)."""
        return self.daemon.running and self.daemon.pid == pid

    def port_strangers(self) -> list[tuple[int, ProcessFacts]]:
        """(port, holder) for each of the daemon's ports held by a process not ours."""
        return [(port, o) for port, owners in sorted(self.port_owners.items())
                for o in owners if not o.supervised and not self.ours(o.pid)]

    def validated_daemon(self, release_id: str | None, release_dir: str) -> ValidatedFacts | None:
        """The evidence that the daemon running now (the same pid AND start time) passed the
        validation of `release_id`, which it serves; None when there is none."""
        v, d = self.validated, self.daemon
        if v is None or not self.serves(release_id, release_dir) or v.release != release_id:
            return None
        return v if (d.pid, d.starttime) == (v.pid, v.starttime) else None

    def digest(self, path: str) -> str | None:
        return self.digests.get(path)

    @property
    def release_ids(self) -> frozenset[str]:
        return frozenset(r.id for r in self.releases)

    def serves(self, release_id: str | None, release_dir: str) -> bool:
        """The daemon runs this release, current points at it, and no hold is set."""
        return bool(
            release_id
            and self.current_release == release_id
            and self.daemon.running
            and self.daemon.exe
            and f"{release_dir.rstrip('/')}/" in self.daemon.exe  # the folder, never a prefix
            and not self.held
        )
