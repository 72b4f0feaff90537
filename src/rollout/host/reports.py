"""What each host action (rollout.host.scripts.ops) reported, as typed values.

A report is hostile data: it comes from the host. One reader (`read`) fills a report class
from the shape its actions declare (ops.SPECS: `@action(args, report, outcomes)`): a key
whose value is not of its declared type is None, or empty where the type is not nullable
(a missing outcome is "unknown"); a list or object keeps only the entries that fit; then
the field's own bound applies (a cut, a range, a digest's form). Never a crash. The raw
report stays with each value (`raw`), for the step's events. A block no action declares on
its own (a job, the budget wait) names its keys in KEYS.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Collection
from dataclasses import MISSING, dataclass, field, fields, replace
from functools import cache
from typing import TYPE_CHECKING, Any, ClassVar, NamedTuple, TypeVar

from rollout.host.scripts import ops
from rollout.host.scripts.actions.reads import APP_FIELDS, GPU_FIELDS
from rollout.host.scripts.actions.spec import fits, type_of
from rollout.host.scripts.actions.work import same_job, without_stuck
from rollout.jsontypes import JSON, JSONObject

if TYPE_CHECKING:
    from _typeshed import DataclassInstance

UNKNOWN = "unknown"
D = TypeVar("D", bound="DataclassInstance")
P = TypeVar("P", bound="Parsed")
Keep = Callable[[Any], Any]


def key(*, keep: Keep | None = None, each: Keep | None = None, of: Keep | None = None,
        most: int | None = None, default: Any = MISSING) -> Any:
    """A report field read from its declared key: `keep` bounds the typed value (None: not
    kept), `each` each entry of a list or object, `of` parses a nested block; `most`: the
    entries looked at."""
    meta = {"keep": keep, "each": each, "of": of, "most": most}
    return field(default=default, metadata={k: v for k, v in meta.items() if v is not None})


DERIVED: Any = field(default=None, metadata={"derived": True})
"""A field that is not a key of its own (read by the class from the others)."""


@cache
def _specs() -> dict[str, Any]:
    specs: dict[str, Any] = ops.SPECS
    return specs


@cache
def shape_of(cls: type) -> dict[str, str]:
    """The keys a report class reads and their declared types: outcome and reason, its
    actions' declared report keys (ops.SPECS), and its KEYS."""
    shape = {"outcome": "str", "reason": "str"}
    for action in getattr(cls, "ACTIONS", ()):
        shape.update({k: type_of(f) for k, f in _specs()[action]["returns"].items()})
    for word in getattr(cls, "KEYS", "").split():
        name, _, kind = word.partition(":")
        shape[name] = kind
    return shape


def read(cls: type[D], doc: JSON) -> D:
    """A report of type `cls` from a host's JSON, by the shape its actions declare."""
    doc = doc if isinstance(doc, dict) else {}
    shape, values = shape_of(cls), {}
    for f in fields(cls):
        if f.name == "raw":
            values["raw"] = doc
        elif not f.metadata.get("derived"):
            value = _value(doc.get(f.name), shape[f.name], f.metadata)
            values[f.name] = UNKNOWN if f.name == "outcome" and value == "" else value
    return cls(**values)


def _value(value: JSON, kind: str, meta: Any) -> Any:
    base = kind.removesuffix("?")
    if "of" in meta and base[0] not in "[{":
        return meta["of"](value)
    value = _entries(value, base, meta) if base[0] in "[{" else _fit(base)(value)
    value = meta["keep"](value) if "keep" in meta else value
    if value is None and not kind.endswith("?"):
        return {"str": "", "bool": False}.get(base)
    return value


def _fit(kind: str) -> Keep:
    """The value where it is of the declared type (a float as a float), else None."""
    return lambda v: (float(v) if kind == "float" else v) if (
        v is not None and fits(v, kind)) else None


def _entries(value: JSON, base: str, meta: Any) -> tuple[Any, ...] | dict[str, Any]:
    """A list's or an object's entries that fit (at most `most` looked at), each kept."""
    one, each = meta.get("of") or _fit(base[1:-1]), meta.get("each") or (lambda v: v)
    most = meta.get("most")

    def kept(v: JSON) -> Any:
        typed = one(v)
        return None if typed is None else each(typed)

    if base[0] == "[":
        items = value[:most] if isinstance(value, list) else []
        return tuple(e for e in map(kept, items) if e is not None)
    pairs = list(value.items())[:most] if isinstance(value, dict) else []
    return {k: e for k, v in pairs if isinstance(k, str) and (e := kept(v)) is not None}


@dataclass(frozen=True)
class Parsed:
    """A report class read by `read` from its actions' declared shape."""

    ACTIONS: ClassVar[tuple[str, ...]] = ()

    @classmethod
    def parse(cls: type[P], doc: JSON) -> P:
        return read(cls, doc)


def _cut(most: int) -> Keep:
    return lambda v: None if v is None else v[:most]


def _tail(most: int) -> Keep:
    return lambda v: None if v is None else v[-most:]


def _within(low: float, high: float) -> Keep:
    return lambda v: v if v is not None and low <= v < high else None


_count = _within(0, 1 << 60)  # a whole number of bytes, jobs or partitions
_seconds = _within(0, 1e9)


def _text(most: int) -> Keep:
    """A host's name for something, printable and cut ("?" where there is none): data for
    a message, never markup."""
    return lambda v: "".join(c if c.isprintable() else "?" for c in (v or "")[:most]) or "?"


def _sha256(text: str | None) -> str | None:
    digest = (text or "").lower()
    return digest if len(digest) == 64 and all(c in "0123456789abcdef" for c in digest) \
        else None


def _json_object(text: str | None) -> JSONObject | None:
    try:
        value = json.loads(text or "null")
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


@dataclass(frozen=True)
class Report(Parsed):
    """Any action's report: its outcome word and why."""

    outcome: str
    reason: str
    raw: JSONObject = field(default_factory=dict, compare=False, repr=False)


@dataclass(frozen=True)
class Partitions:
    """A job's partitions as the host counted them: holding a reservation, done, in all
    (0 where one is mistyped or out of range)."""

    KEYS: ClassVar[str] = "active:int done:int total:int"
    active: int = key(keep=lambda v: _count(v) or 0)
    done: int = key(keep=lambda v: _count(v) or 0)
    total: int = key(keep=lambda v: _count(v) or 0)


@dataclass(frozen=True)
class Job:
    """One job on the daemon, as ops.work (in flight) or ops.prove's budget watch named it:
    cuzk's proof kind, its id, its age, and its partitions where the host counted them."""

    KEYS: ClassVar[str] = "kind:str id:str age:float? steps:int? seen:str?"
    kind: str = key(keep=_text(40))
    id: str = key(keep=_text(80))
    age: float | None = key(keep=_seconds)  # seconds since it started, where /status says
    partitions: Partitions | None = DERIVED
    steps: int | None = key(keep=_count, default=None)  # its progress (ops.work: STAGES)
    seen: str | None = key(keep=_cut(10), default=None)  # the signal that named it

    def same(self, other: Job) -> bool:
        """One job named twice (ops.work's same_job: an id and cuzk-bench's first 8)."""
        return same_job(self.id, other.id, self.seen, other.seen)

    @classmethod
    def parse(cls, doc: JSON, counted: bool = False) -> Job | None:
        """A job entry (None where it is not an object); `counted`: its partitions too."""
        if not isinstance(doc, dict):
            return None
        return replace(read(cls, doc), partitions=read(Partitions, doc) if counted else None)

    @classmethod
    def counted(cls, doc: JSON) -> Job | None:
        return cls.parse(doc, counted=True)

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


@dataclass(frozen=True)
class BudgetWait:
    """ops.prove's budget_wait block: the proof's job that waited for cuzk's memory budget,
    the jobs holding a partition (at most 32), the budget's figures in bytes, whether
    anything could release room, how long it waited and the limit it had."""

    KEYS: ClassVar[str] = ("job:obj others:[obj] total:int used:int available:int pinned:int "
                           "partition:int releasable:bool waited:float limit:float")
    job: Job = key(of=Job.counted)
    others: tuple[Job, ...] = key(of=Job.counted, most=32)
    total: int = key(keep=_count)
    used: int = key(keep=_count)
    available: int = key(keep=_count)
    pinned: int = key(keep=_count)  # bytes of the SRS and PCE allocations
    partition: int = key(keep=_count)  # what one partition of the kind needs
    releasable: bool = key()
    waited: float = key(keep=_seconds)
    limit: float = key(keep=_seconds)

    @classmethod
    def parse(cls, doc: JSON) -> BudgetWait | None:
        """The block; None where it is not one, or any figure is missing (none is guessed)."""
        if not isinstance(doc, dict):
            return None
        wait = read(cls, doc)
        return None if any(getattr(wait, f.name) is None for f in fields(wait)) else wait


@dataclass(frozen=True)
class ProveReport(Parsed):
    """ops.prove: the proof's exit code (1 when unknown), how long it ran, its output,
    /status after a proof that was stopped, whether the evidence was written, and what
    /status showed when a proof that waited for budget was stopped (BudgetWait)."""

    ACTIONS = ("prove",)
    exit: int = key(keep=lambda v: 1 if v is None else v)
    elapsed: float = key(keep=lambda v: v or 0.0)
    stdout: str = key()
    stderr: str = key()
    status_after: JSONObject | None = key()
    recorded: bool = key()
    budget_wait: BudgetWait | None = key(of=BudgetWait.parse, default=None)
    raw: JSONObject = field(default_factory=dict, compare=False, repr=False)

    @classmethod
    def parse(cls, doc: JSON) -> ProveReport:
        """A budget_wait block is read only with the outcome "budget-wait"."""
        report = read(cls, doc)
        waited = report.raw.get("outcome") == "budget-wait"
        return report if waited else replace(report, budget_wait=None)


@dataclass(frozen=True)
class WorkReport(Parsed):
    """ops.work, from every signal cuzk gives (/status, GetStatus, its working memory): idle
    (every signal that answered says so), busy (the jobs in flight, the queue's depth, the
    working memory above the SRS and PCE), unknown (a daemon runs and no signal answered, or
    a /status not of cuzk's shape), no-answer (nothing answered and no daemon runs). Each
    signal's word in `signals` (status, grpc, memory: idle, busy, unknown or none)."""

    ACTIONS = ("work",)
    outcome: str
    reason: str = key(keep=_cut(300))
    jobs: tuple[Job, ...] = key(of=Job.parse, most=50)
    queue_depth: int | None = key(keep=_count)
    working_bytes: int | None = key(keep=_count, default=None)
    signals: dict[str, str] | None = key(each=_text(20), most=8, default=None)
    raw: JSONObject = field(default_factory=dict, compare=False, repr=False)

    @property
    def idle(self) -> bool:
        """Nothing in flight by any signal that answered (and one did)."""
        return self.outcome == "idle"

    def without(self, jobs: tuple[Job, ...]) -> WorkReport:
        """This look with `jobs` (stuck: never to end) not in flight: idle where nothing
        else showed work (no other job, no queue, no working memory), unknown where a
        signal did not read."""
        rest = tuple(j for j in self.jobs if not any(j.same(s) for s in jobs))
        outcome = without_stuck(self.outcome, len(rest), self.queue_depth,
                                self.working_bytes, (self.signals or {}).values())
        return replace(self, jobs=rest, outcome=outcome)


@dataclass(frozen=True)
class CommandReport(Parsed):
    """ops.user_command, cordon, uncordon: the outcome word, the exit code, the output (its
    last 2,000 characters)."""

    ACTIONS = ("user_command", "cordon", "uncordon")
    outcome: str
    reason: str = key(keep=_cut(300))
    exit: int | None = key()
    output: str = key(keep=_tail(2000))
    raw: JSONObject = field(default_factory=dict, compare=False, repr=False)


MOST_GPUS = 64  # lines of nvidia-smi read; a host with more is refused, not half read
MOST_APPS = 256
_MIB = re.compile(r"^\d{1,8}$")  # MiB, at most ~95 TiB
_CAP = re.compile(r"^(\d{1,2})\.(\d)$")
_DRIVER = re.compile(r"^\d{1,4}(?:\.\d{1,4}){0,3}$")
_INDEX = re.compile(r"^\s*(\d{1,3})\s*,")  # a GPU line's first cell: its index


class Gpu(NamedTuple):
    """One GPU as nvidia-smi listed it (reads.GPU_FIELDS), each field checked: None where it
    said something else ("[N/A]", a word, a figure out of range), and what it said in `odd`."""

    ordinal: int  # nvidia-smi's index
    uuid: str
    name: str
    driver: tuple[int, ...] | None
    compute_cap: int | None  # 89 for "8.9"
    total: int | None  # bytes
    free: int | None  # bytes
    odd: dict[str, str]  # field: what nvidia-smi said, where that is not a value

    @classmethod
    def parse(cls, line: str) -> Gpu | str:
        """A GPU from one line, or why the line is not one."""
        cells = [c.strip() for c in line.split(",")]
        if len(cells) != len(GPU_FIELDS):
            return f"a line of {len(cells)} fields, not {len(GPU_FIELDS)}: {_text(80)(line)!r}"
        said = dict(zip(GPU_FIELDS, cells, strict=True))
        if not said["index"].isdigit() or len(said["index"]) > 3:
            return f"a GPU index that is not one: {_text(20)(said['index'])!r}"
        driver, cap = said["driver_version"], _CAP.match(said["compute_cap"])
        gpu = cls(int(said["index"]), _text(80)(said["uuid"]), _text(60)(said["name"]),
                  tuple(int(p) for p in driver.split(".")) if _DRIVER.match(driver) else None,
                  int(cap.group(1)) * 10 + int(cap.group(2)) if cap else None,
                  _mib(said["memory.total"]), _mib(said["memory.free"]), {})
        read = {"driver_version": gpu.driver, "compute_cap": gpu.compute_cap,
                "memory.total": gpu.total, "memory.free": gpu.free}
        return gpu._replace(odd={k: _text(20)(said[k]) for k, v in read.items() if v is None})

    def describe(self) -> str:
        return f"GPU {self.ordinal} ({self.name})"


def _mib(text: str) -> int | None:
    return int(text) * 1024**2 if _MIB.match(text) else None


def gpu_line(line: str) -> bool:
    """A line of a GPU's shape (an index then a comma, or GPU_FIELDS' count of fields): read
    as one, refused where malformed; any other line nvidia-smi printed is no GPU."""
    return bool(_INDEX.match(line)) or len(line.split(",")) == len(GPU_FIELDS)


@dataclass(frozen=True)
class GpuReport(Parsed):
    """ops.gpus: nvidia-smi's exit code and its lines for each GPU (read by `listed`), the
    memory each process holds on each GPU (`held`), and what it said besides (`said`)."""

    ACTIONS = ("gpus",)
    outcome: str
    reason: str = key(keep=_cut(300))
    exit: int | None = key()
    output: str = key(keep=_tail(8192))
    apps_exit: int | None = key()
    apps: str = key(keep=_tail(8192))
    warnings: str = key(keep=_tail(2000), default="")  # its stderr, where it answered
    raw: JSONObject = field(default_factory=dict, compare=False, repr=False)

    def listed(self, used: Collection[int] = ()) -> tuple[tuple[Gpu, ...], list[str]]:
        """The GPUs nvidia-smi listed, and each GPU line that is malformed (named) where it
        is of a GPU in `used` (none: every GPU) or its index cannot be read."""
        lines = [line for line in self.output.splitlines() if line.strip()]
        found: list[Gpu] = []
        gpus = [n for n, line in enumerate(lines, 1) if gpu_line(line)]
        problems = [f"nvidia-smi listed {len(gpus)} GPU lines, more than {MOST_GPUS}"] \
            if len(gpus) > MOST_GPUS else []
        for n in gpus[:MOST_GPUS]:
            gpu, index = Gpu.parse(lines[n - 1]), _INDEX.match(lines[n - 1])
            if isinstance(gpu, Gpu):
                found.append(gpu)
            elif not used or index is None or int(index.group(1)) in used:
                problems.append(f"nvidia-smi's line {n} is {gpu}")
        return tuple(found), problems

    def said(self) -> list[str]:
        """What nvidia-smi said that is no GPU (a warning on stderr, a line of another
        shape), each cut: information, never a refusal."""
        lines = [*self.output.splitlines(), *self.warnings.splitlines()]
        return [_text(120)(ln) for ln in lines if ln.strip() and not gpu_line(ln)][:5]

    def held(self, pids: set[int]) -> dict[str, int]:
        """Bytes the processes `pids` hold on each GPU (by uuid), as nvidia-smi counts them
        (a line that is not a process's, or "[N/A]" memory, counts nothing)."""
        out: dict[str, int] = {}
        for line in self.apps.splitlines()[:MOST_APPS] if self.apps_exit == 0 else ():
            cells = [c.strip() for c in line.split(",")]
            if len(cells) != len(APP_FIELDS) or not cells[1].isdigit() or len(cells[1]) > 9:
                continue
            used = _mib(cells[2])
            if int(cells[1]) in pids and used is not None:
                out[cells[0]] = out.get(cells[0], 0) + used
        return out


@dataclass(frozen=True)
class PointedReport(Parsed):
    """ops.pointed: the release current points at and the one recorded before it (each
    as the host said: check it is a release id before using it)."""

    ACTIONS = ("pointed",)
    outcome: str
    reason: str
    current: str | None = key(keep=lambda v: v or None)
    previous: str | None = key(keep=lambda v: v or None)
    raw: JSONObject = field(default_factory=dict, compare=False, repr=False)


@dataclass(frozen=True)
class TextReport(Parsed):
    """ops.log_tail, cpu_info: the outcome word and the text it read (at most 64 KiB)."""

    ACTIONS = ("log_tail", "cpu_info")
    outcome: str
    reason: str
    text: str = key(keep=_tail(65536))
    raw: JSONObject = field(default_factory=dict, compare=False, repr=False)


@dataclass(frozen=True)
class InputReport(Parsed):
    """ops.input_check: present, missing, wrong-size; the size and the sha256 the host saw."""

    ACTIONS = ("input_check",)
    outcome: str
    reason: str = key(keep=_cut(300))
    size: int | None = key()
    sha256: str | None = key(keep=_sha256)
    raw: JSONObject = field(default_factory=dict, compare=False, repr=False)


@dataclass(frozen=True)
class ProbeReport(Parsed):
    """ops.probe: the input check, /status (a JSON object, or None when off, silent or not
    an object) and the ports' owners (None where there was no port to ask about)."""

    ACTIONS = ("probe",)
    input: InputReport = key(of=InputReport.parse)
    status: JSONObject | None = key(keep=_json_object)
    owners: JSONObject | None = key()
    raw: JSONObject = field(default_factory=dict, compare=False, repr=False)


@dataclass(frozen=True)
class FilesReport(Parsed):
    """ops.identities, file_sums, read_release, install_release: each file's identity (size,
    inode, device, mtime, ctime) or sha256 the host read, a file it could not read left out
    (at most 64); the manifest's text (read_release, at most 1 MiB)."""

    ACTIONS = ("identities", "file_sums", "read_release", "install_release")
    outcome: str
    reason: str = key(keep=_cut(400))
    identities: dict[str, str] = key(each=lambda v: v if len(v) <= 200 and v else None,
                                     most=64)
    sums: dict[str, str] = key(each=_sha256, most=64)
    manifest: str = key(keep=_cut(1 << 20))
    raw: JSONObject = field(default_factory=dict, compare=False, repr=False)


@dataclass(frozen=True)
class SurveyReport(Parsed):
    """ops.staging_survey: the folders that are links, the stale staging removed, whether
    the release is on the host already and whether a rename stays on one device."""

    ACTIONS = ("staging_survey",)
    outcome: str
    reason: str = key(keep=_cut(400))
    links: tuple[str, ...] = key(each=_cut(200), most=3)
    stale: tuple[str, ...] = key(each=_cut(80), most=20)
    present: bool = key()
    same_device: bool = key()
    raw: JSONObject = field(default_factory=dict, compare=False, repr=False)


@dataclass(frozen=True)
class OutputsReport(Parsed):
    """ops.ldd: each executable's output (at most 64, 8 KiB kept each)."""

    ACTIONS = ("ldd",)
    outcome: str
    reason: str = key(keep=_cut(400))
    outputs: dict[str, str] = key(each=_tail(8192), most=64)
    raw: JSONObject = field(default_factory=dict, compare=False, repr=False)
