"""What each host action (rollout.host.scripts.ops) reported, as typed values.

A report is hostile data: it comes from the host. Every field is read with its type
checked; a wrong type becomes "unknown" (an outcome), None or empty, never a crash. The raw
report stays with each value (`raw`), for the step's events.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field

from rollout.jsontypes import JSON, JSONObject

UNKNOWN = "unknown"


def _str(doc: JSONObject, key: str, default: str = "") -> str:
    value = doc.get(key)
    return value if isinstance(value, str) else default


def _int(doc: JSONObject, key: str) -> int | None:
    value = doc.get(key)
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _float(doc: JSONObject, key: str) -> float | None:
    value = doc.get(key)
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value)
    return None


def _count(doc: JSONObject, key: str) -> int | None:
    """A whole number of bytes or partitions, within range (a bool, a float, a negative or
    absurd figure is None)."""
    value = _int(doc, key)
    return value if value is not None and 0 <= value < (1 << 60) else None


def _seconds(doc: JSONObject, key: str) -> float | None:
    """Seconds, within range (never NaN, infinite or negative)."""
    value = _float(doc, key)
    return value if value is not None and 0 <= value < 1e9 else None


def _text(doc: JSONObject, key: str, limit: int) -> str:
    """A host's name for something, printable and cut to `limit` ("?" where there is none):
    data for a message, never markup."""
    text = _str(doc, key)[:limit]
    return "".join(c if c.isprintable() else "?" for c in text) or "?"


def _dict(doc: JSONObject, key: str) -> JSONObject | None:
    value = doc.get(key)
    return value if isinstance(value, dict) else None


def _ints(value: JSON) -> tuple[int, ...]:
    items = value if isinstance(value, list) else []
    return tuple(v for v in items if isinstance(v, int) and not isinstance(v, bool))


@dataclass(frozen=True)
class Report:
    """Any action's report: its outcome word and why."""

    outcome: str
    reason: str
    raw: JSONObject = field(default_factory=dict, compare=False, repr=False)

    @classmethod
    def parse(cls, doc: JSON) -> Report:
        doc = doc if isinstance(doc, dict) else {}
        return cls(_str(doc, "outcome", UNKNOWN), _str(doc, "reason"), doc)


@dataclass(frozen=True)
class StopReport:
    """ops.stop: none, untrusted, already-dead, stopped, still-running, respawned, kept."""

    outcome: str
    reason: str
    pid: int | None
    starttime: int | None
    signal: str
    escalated: bool
    state: str
    parent: int | None
    parent_cmdline: str
    cmdline: str
    respawned: tuple[int, ...]
    raw: JSONObject = field(default_factory=dict, compare=False, repr=False)

    @classmethod
    def parse(cls, doc: JSON) -> StopReport:
        doc = doc if isinstance(doc, dict) else {}
        return cls(_str(doc, "outcome", UNKNOWN), _str(doc, "reason"), _int(doc, "pid"),
                   _int(doc, "starttime"), _str(doc, "signal", "?"),
                   doc.get("escalated") is True, _str(doc, "state", UNKNOWN),
                   _int(doc, "parent"), _str(doc, "parent_cmdline"), _str(doc, "cmdline"),
                   _ints(doc.get("respawned")), doc)


@dataclass(frozen=True)
class StartReport:
    """ops.start: no-release, refused, started, running, not-started."""

    outcome: str
    reason: str
    release: str
    pid: int | None
    pidline: str
    raw: JSONObject = field(default_factory=dict, compare=False, repr=False)

    @classmethod
    def parse(cls, doc: JSON) -> StartReport:
        doc = doc if isinstance(doc, dict) else {}
        return cls(_str(doc, "outcome", UNKNOWN), _str(doc, "reason"), _str(doc, "release"),
                   _int(doc, "pid"), _str(doc, "pidline"), doc)


@dataclass(frozen=True)
class ReadyReport:
    """ops.wait_ready: ready (the status answer and the ports' owners), died, timeout."""

    outcome: str
    reason: str
    answer: str
    owners: JSONObject | None
    raw: JSONObject = field(default_factory=dict, compare=False, repr=False)

    @classmethod
    def parse(cls, doc: JSON) -> ReadyReport:
        doc = doc if isinstance(doc, dict) else {}
        return cls(_str(doc, "outcome", UNKNOWN), _str(doc, "reason"), _str(doc, "answer"),
                   _dict(doc, "owners"), doc)


@dataclass(frozen=True)
class ProveReport:
    """ops.prove: the proof's exit code (1 when unknown), how long it ran, its output,
    /status after a proof that was stopped, whether the evidence was written, and what
    /status showed when a proof that waited for budget was stopped (BudgetWait)."""

    exit: int
    elapsed: float
    stdout: str
    stderr: str
    status_after: JSONObject | None
    recorded: bool
    budget_wait: BudgetWait | None = None  # outcome "budget-wait" with a well-formed block
    raw: JSONObject = field(default_factory=dict, compare=False, repr=False)

    @classmethod
    def parse(cls, doc: JSON) -> ProveReport:
        doc = doc if isinstance(doc, dict) else {}
        code = _int(doc, "exit")
        waited = (BudgetWait.parse(doc.get("budget_wait"))
                  if _str(doc, "outcome") == "budget-wait" else None)
        return cls(1 if code is None else code, _float(doc, "elapsed") or 0.0,
                   _str(doc, "stdout"), _str(doc, "stderr"), _dict(doc, "status_after"),
                   doc.get("recorded") is True, waited, doc)


@dataclass(frozen=True)
class PointReport:
    """ops.point_current: refused, kept, missing, pointed; the release it pointed at before."""

    outcome: str
    reason: str
    previous: str | None
    raw: JSONObject = field(default_factory=dict, compare=False, repr=False)

    @classmethod
    def parse(cls, doc: JSON) -> PointReport:
        doc = doc if isinstance(doc, dict) else {}
        previous = doc.get("previous")
        return cls(_str(doc, "outcome", UNKNOWN), _str(doc, "reason"),
                   previous if isinstance(previous, str) else None, doc)


@dataclass(frozen=True)
class Partitions:
    """A job's partitions as the host counted them: holding a reservation, done, in all."""

    active: int
    done: int
    total: int

    @classmethod
    def parse(cls, doc: JSONObject) -> Partitions:
        """The counts, 0 where one is mistyped or out of range."""
        return cls(*(_count(doc, k) or 0 for k in ("active", "done", "total")))


@dataclass(frozen=True)
class Job:
    """One job on the daemon, as ops.work (in flight) or ops.prove's budget watch named it:
    cuzk's proof kind, its id, its age, and its partitions where the host counted them."""

    kind: str
    id: str
    age: float | None  # seconds since it started, where /status says
    partitions: Partitions | None = None

    @classmethod
    def parse(cls, doc: JSON, counted: bool = False) -> Job | None:
        """A job entry (None where it is not an object); `counted`: its partitions too."""
        if not isinstance(doc, dict):
            return None
        return cls(_text(doc, "kind", 40), _text(doc, "id", 80), _seconds(doc, "age"),
                   Partitions.parse(doc) if counted else None)

    def describe(self) -> str:
        if self.partitions is None:
            age = "age unknown" if self.age is None else f"{self.age:.0f}s"
            return f"{self.kind} {self.id} ({age})"
        p = self.partitions
        age = "?" if self.age is None else f"{self.age:g} s"
        return (f"{self.kind} {self.id} (running {age}, {p.done}/{p.total} partitions done, "
                f"{p.active} in flight)")

    def data(self) -> dict[str, JSON]:
        counts = {} if self.partitions is None else {
            "active": self.partitions.active, "done": self.partitions.done,
            "total": self.partitions.total}
        return {"kind": self.kind, "id": self.id, "age": self.age, **counts}


def _jobs(value: JSON, most: int, counted: bool = False) -> tuple[Job, ...]:
    """The job entries of a list (at most `most`), anything else left out."""
    items = value if isinstance(value, list) else []
    jobs = (Job.parse(j, counted) for j in items[:most])
    return tuple(j for j in jobs if j is not None)


@dataclass(frozen=True)
class WorkReport:
    """ops.work: idle, busy (the jobs in flight and the queue's depth), unknown (a /status
    not of cuzk's shape), no-answer (no status port answered)."""

    outcome: str
    reason: str
    jobs: tuple[Job, ...]
    queue_depth: int | None
    raw: JSONObject = field(default_factory=dict, compare=False, repr=False)

    @classmethod
    def parse(cls, doc: JSON) -> WorkReport:
        doc = doc if isinstance(doc, dict) else {}
        depth = _int(doc, "queue_depth")
        return cls(_str(doc, "outcome", UNKNOWN), _str(doc, "reason")[:300],
                   _jobs(doc.get("jobs"), 50), depth if depth is None or depth >= 0 else None, doc)

    @property
    def idle(self) -> bool:
        """Nothing in flight, nothing queued (or no daemon answering: nothing can be)."""
        return self.outcome in ("idle", "no-answer") or (
            self.outcome == "busy" and not self.jobs and not self.queue_depth)


@dataclass(frozen=True)
class CommandReport:
    """ops.user_command, cordon, uncordon: the outcome word, the exit code, the output."""

    outcome: str
    reason: str
    exit: int | None
    output: str
    raw: JSONObject = field(default_factory=dict, compare=False, repr=False)

    @classmethod
    def parse(cls, doc: JSON) -> CommandReport:
        doc = doc if isinstance(doc, dict) else {}
        return cls(_str(doc, "outcome", UNKNOWN), _str(doc, "reason")[:300], _int(doc, "exit"),
                   _str(doc, "output")[-2000:], doc)


@dataclass(frozen=True)
class PointedReport:
    """ops.pointed: the release current points at and the one recorded before it (each
    as the host said: check it is a release id before using it)."""

    outcome: str
    reason: str
    current: str | None
    previous: str | None
    raw: JSONObject = field(default_factory=dict, compare=False, repr=False)

    @classmethod
    def parse(cls, doc: JSON) -> PointedReport:
        doc = doc if isinstance(doc, dict) else {}
        return cls(_str(doc, "outcome", UNKNOWN), _str(doc, "reason"),
                   _str(doc, "current") or None, _str(doc, "previous") or None, doc)


@dataclass(frozen=True)
class TextReport:
    """ops.log_tail: the outcome word and the text it read (at most 64 KiB kept)."""

    outcome: str
    reason: str
    text: str
    raw: JSONObject = field(default_factory=dict, compare=False, repr=False)

    @classmethod
    def parse(cls, doc: JSON) -> TextReport:
        doc = doc if isinstance(doc, dict) else {}
        return cls(_str(doc, "outcome", UNKNOWN), _str(doc, "reason"),
                   _str(doc, "text")[-65536:], doc)


@dataclass(frozen=True)
class InputReport:
    """ops.input_check: present, missing, wrong-size; the size and the sha256 the host saw."""

    outcome: str
    reason: str
    size: int | None
    sha256: str | None
    raw: JSONObject = field(default_factory=dict, compare=False, repr=False)

    @classmethod
    def parse(cls, doc: JSON) -> InputReport:
        doc = doc if isinstance(doc, dict) else {}
        digest = _str(doc, "sha256").lower()
        ok = len(digest) == 64 and all(c in "0123456789abcdef" for c in digest)
        return cls(_str(doc, "outcome", UNKNOWN), _str(doc, "reason")[:300], _int(doc, "size"),
                   digest if ok else None, doc)


@dataclass(frozen=True)
class ProbeReport:
    """ops.probe: the input check, /status (a JSON object, or None when off, silent or not
    an object) and the ports' owners (None where there was no port to ask about)."""

    input: InputReport
    status: JSONObject | None
    owners: JSONObject | None
    raw: JSONObject = field(default_factory=dict, compare=False, repr=False)

    @classmethod
    def parse(cls, doc: JSON) -> ProbeReport:
        doc = doc if isinstance(doc, dict) else {}
        try:
            status = json.loads(_str(doc, "status") or "null")
        except ValueError:
            status = None
        return cls(InputReport.parse(doc.get("input")),
                   status if isinstance(status, dict) else None, _dict(doc, "owners"), doc)


_MAX_IDENTITY = 200  # an identity longer than this is not a stat's: hostile, never a match


def _named(value: JSON, keep: Callable[[str], bool]) -> dict[str, str]:
    """{name: text} of a JSON object's entries whose text `keep` accepts (at most 64)."""
    items = value if isinstance(value, dict) else {}
    return {k: v for k, v in list(items.items())[:64] if isinstance(v, str) and keep(v)}


def _sha256(text: str) -> bool:
    return len(text) == 64 and all(c in "0123456789abcdef" for c in text)


@dataclass(frozen=True)
class FilesReport:
    """ops.identities, file_sums, read_release, install_release: each file's identity (size,
    inode, device, mtime, ctime) or sha256 the host read, a file it could not read left out;
    the manifest's text (read_release)."""

    outcome: str
    reason: str
    identities: dict[str, str]
    sums: dict[str, str]
    manifest: str
    raw: JSONObject = field(default_factory=dict, compare=False, repr=False)

    @classmethod
    def parse(cls, doc: JSON) -> FilesReport:
        doc = doc if isinstance(doc, dict) else {}
        return cls(_str(doc, "outcome", UNKNOWN), _str(doc, "reason")[:400],
                   _named(doc.get("identities"), lambda v: 0 < len(v) <= _MAX_IDENTITY),
                   _named(doc.get("sums"), _sha256), _str(doc, "manifest")[: 1 << 20], doc)


@dataclass(frozen=True)
class SurveyReport:
    """ops.staging_survey: the folders that are links, the stale staging removed, whether
    the release is on the host already and whether a rename stays on one device."""

    outcome: str
    reason: str
    links: tuple[str, ...]
    stale: tuple[str, ...]
    present: bool
    same_device: bool
    raw: JSONObject = field(default_factory=dict, compare=False, repr=False)

    @classmethod
    def parse(cls, doc: JSON) -> SurveyReport:
        doc = doc if isinstance(doc, dict) else {}
        return cls(_str(doc, "outcome", UNKNOWN), _str(doc, "reason")[:400],
                   _strs(doc.get("links"), 3, 200), _strs(doc.get("stale"), 20, 80),
                   doc.get("present") is True, doc.get("same_device") is True, doc)


def _strs(value: JSON, most: int, length: int) -> tuple[str, ...]:
    items = value if isinstance(value, list) else []
    return tuple(v[:length] for v in items[:most] if isinstance(v, str))


@dataclass(frozen=True)
class OutputsReport:
    """ops.ldd: each executable's output (at most 8 KiB kept each)."""

    outcome: str
    reason: str
    outputs: dict[str, str]
    raw: JSONObject = field(default_factory=dict, compare=False, repr=False)

    @classmethod
    def parse(cls, doc: JSON) -> OutputsReport:
        doc = doc if isinstance(doc, dict) else {}
        outputs = {k: v[-8192:] for k, v in _named(doc.get("outputs"), lambda v: True).items()}
        return cls(_str(doc, "outcome", UNKNOWN), _str(doc, "reason")[:400], outputs, doc)


@dataclass(frozen=True)
class BudgetWait:
    """ops.prove's budget_wait block: the proof's job that waited for cuzk's memory budget,
    the jobs holding a partition (at most 32), the budget's figures in bytes, whether
    anything could release room, how long it waited and the limit it had."""

    job: Job
    others: tuple[Job, ...]
    total: int
    used: int
    available: int
    pinned: int  # bytes of the SRS and PCE allocations
    partition: int  # what one partition of the kind needs
    releasable: bool
    waited: float
    limit: float

    @classmethod
    def parse(cls, doc: JSON) -> BudgetWait | None:
        """The block; None where it is not one (no figure is guessed)."""
        if not isinstance(doc, dict):
            return None
        job = Job.parse(doc.get("job"), counted=True)
        figures = [_count(doc, k) for k in ("total", "used", "available", "pinned", "partition")]
        waited, limit = _seconds(doc, "waited"), _seconds(doc, "limit")
        if job is None or waited is None or limit is None or None in figures:
            return None
        total, used, available, pinned, partition = (int(f or 0) for f in figures)
        return cls(job, _jobs(doc.get("others"), 32, counted=True), total, used, available,
                   pinned, partition, doc.get("releasable") is True, waited, limit)
