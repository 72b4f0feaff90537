"""Preflight: before anything on a host changes, check that the rollout can succeed there.

Each check is its own function returning the problems it found (empty: fine). The step's
`checks` param picks some of them (default: all); the executables check needs the release
on the host, so a playbook runs it again after the upload, still before the old daemon is
touched: `{name: preflight-executables, kind: preflight, params: {checks: [executables]}}`.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Literal, NamedTuple

from pydantic import Field

from rollout.config import cuda
from rollout.config.params_manifest import kind as proof_kind
from rollout.config.playbook import Playbook
from rollout.config.steps import KindRule, StrictParams
from rollout.errors import StepFailed
from rollout.host.facts import HostFacts, Parent, ProcessFacts
from rollout.host.reports import Gpu, GpuReport, OutputsReport, Report, TextReport
from rollout.jsontypes import JSON, JSONObject
from rollout.output.events import StepResult, ok
from rollout.steps.base import HostContext, Kind
from rollout.steps.budget import WARNING, BudgetRule, decide_budget
from rollout.steps.daemon import cannot_adopt
from rollout.steps.decision import Action, Call, Decision, Target
from rollout.steps.gather import Fact
from rollout.steps.params import check_params, params_calls, probe_reads
from rollout.steps.preflight_inputs import (
    Later,
    Look,
    c1_facts,
    check_c1_ids,
    check_pce_space,
    pce_facts,
)
from rollout.steps.validate import ensure_input, input_calls, input_reads
from rollout.units import format_size

PreflightCheck = Literal[
    "files", "ownership", "space", "budget", "cpu", "gpus", "executables", "input"
]


class PreflightParams(StrictParams):
    checks: list[PreflightCheck] | None = Field(
        default=None,
        description="The checks to run (default: all): files (no link where rollout writes, "
        "root-owned folders no one else may write), ownership (no daemon the supervisor "
        "does not own, no stranger on its ports), space, budget, cpu, gpus, executables "
        "(needs the release on the host: run it again after the upload), input.",
    )

    def load_warnings(self) -> list[tuple[str, str]]:
        if self.checks == []:
            return [("checks", "an empty list runs every check; name at least one check, or "
                               "remove the step (an empty list will stop loading)")]
        return []


SPACE_MARGIN = 8 * 1024**2  # room for logs and records beside the release

Check = Callable[[Look, list[str]], list[str]]
"""A check: the problems it finds (empty: fine), its notes added; Later where the plan's facts
cannot judge it."""


def _space_needed(look: Look) -> int:
    if look.release is None or _release_on_host(look.target, look.facts):
        return SPACE_MARGIN
    return 2 * sum(a.size for a in look.release.artifacts) + SPACE_MARGIN


def _release_on_host(target: Target, facts: HostFacts) -> bool:
    return target.release is not None and target.release.id in facts.release_ids


def check_space(look: Look, notes: list[str]) -> list[str]:
    problems = []
    root, facts = look.layout.root, look.facts
    if not facts.root_writable:
        problems.append(f"{root} is not writable")
    free = facts.free_bytes
    need = _space_needed(look)
    if free is not None and free < need:
        problems.append(
            f"{root} has {format_size(free)} free, the release needs {format_size(need)}"
        )
    if not facts.python:
        problems.append("python3 is missing on the host")
    notes.append(f"{root} writable, {format_size(free)} free")
    return problems


def check_budget(look: Look, notes: list[str]) -> list[str]:
    """The budget rule (rollout.steps.budget) accepts the host: a budget it can size (no
    cgroup limit: only an explicit daemon.total_budget), under the limit minus the margin,
    and at least what the proof type needs."""
    budget = decide_budget(look.facts.memory, BudgetRule.of(look.settings))
    if budget.refusal is not None:
        return [budget.refusal]
    notes.append(budget.note())
    return []


def cpu_flags(text: str) -> set[str]:
    """The flags of the first CPU in /proc/cpuinfo ("flags" on x86, "Features" on arm)."""
    for line in text.splitlines():
        key, _, value = line.partition(":")
        if key.strip() in ("flags", "Features"):
            return set(value.split())
    return set()


def cpu_facts(target: Target) -> list[Fact]:
    return [Fact("cpu_info")] if target.settings.preflight.cpu_flags else []


def check_cpu(look: Look, notes: list[str]) -> list[str]:
    want = list(look.settings.preflight.cpu_flags)
    if not want:
        return []
    (fact,) = cpu_facts(look.target)
    have = cpu_flags(TextReport.parse(look.read(fact)).text)
    missing = [f for f in want if f not in have]
    if missing:
        return [
            f"the CPU lacks {', '.join(missing)}, which the build needs (preflight.cpu_flags; "
            "build with cuzk's portable feature for such hosts, and set preflight.cpu_flags "
            "to [] to turn the check off: the default playbook's var cpu_flags)"
        ]
    notes.append(f"CPU has {', '.join(want)}")
    return []


GPU_CHECK_OFF = (
    "; a host without GPUs: set preflight.gpus false (in the default playbook, "
    "the host var has_gpu: false)"
)


def gpu_facts(target: Target) -> list[Fact]:
    return [Fact("gpus", {"timeout": 60}, timeout=130)] if target.settings.preflight.gpus else []


@dataclass(frozen=True)
class CudaBuild:
    """What the release was built with (its CUDA_BASE and CUDA_ARCHS build arguments): the
    CUDA release its base's tag names and the architectures it has code for (None: not
    known, no such check)."""

    base: str
    version: tuple[int, int] | None
    archs: list[int] | None
    unread: str = ""  # a CUDA_ARCHS that names no architecture rollout knows (noted)

    @classmethod
    def of(cls, target: Target) -> CudaBuild:
        """The release's (its manifest's, or the build's); a dry run's pending build: the
        playbook's build section."""
        args = dict(target.release.build_args) if target.release is not None else {}
        if target.release is None and target.pending and target.settings.build_section:
            args = target.settings.build_section.build_args()
        base, said = args.get("CUDA_BASE", "")[:200], args.get("CUDA_ARCHS", "")[:200]
        try:
            archs = cuda.parse_archs(said) if said else None
        except ValueError:
            return cls(base, cuda.base_version(base) if base else None, None, said)
        return cls(base, cuda.base_version(base) if base else None, archs)


def check_gpus(look: Look, notes: list[str]) -> list[str]:
    """nvidia-smi lists the daemon's GPUs (daemon.gpu_devices; none named: every GPU); on
    each, the driver runs the release's CUDA build, the build has code for the GPU, and
    the memory free for the new daemon (with what the old one holds, freed by the stop)
    is what validate.proof_kind needs (kinds.yaml vram)."""
    if not look.settings.preflight.gpus:
        notes.append("no GPU check (the host's vars say it has none)")
        return []
    (fact,) = gpu_facts(look.target)
    r = GpuReport.parse(look.read(fact))
    if r.exit != 0:
        return [_nvidia_smi_failed(r, look.target)]
    listed, odd = r.listed(_wanted(look.settings))
    if odd:
        return odd
    said = r.said()
    notes += [f"{WARNING}nvidia-smi said besides its GPU lines: {' | '.join(said)}"] \
        if said else []
    used, problems = _daemon_gpus(look, listed)
    if problems:
        return problems
    build, need = CudaBuild.of(look.target), _vram_need(look.settings)
    room, hidden = _room(r, used, look.facts)
    for gpu in used:
        problems += _gpu_problems(gpu, build, need, room[gpu.ordinal], hidden)
    if not problems:
        notes.append(_gpus_note(used, build, need, hidden))
        notes += [_hidden_warning(used, need)] if hidden and need is not None else []
    return problems


def _nvidia_smi_failed(r: GpuReport, target: Target) -> str:
    """Why nvidia-smi failed, and what to do: an nvidia-smi that knows no compute_cap field
    ("is not a valid field", exit 2) is of a driver before R510, too old for the release."""
    lines = [ln.strip() for ln in r.output.splitlines() if ln.strip()]
    field = [ln for ln in lines if "not a valid field" in ln.lower()]
    if r.exit == 2 and field:
        version = CudaBuild.of(target).version
        major = version[0] if version else 12
        old = "too old for preflight's GPU check, R510 or newer" if major < 12 else (
            f"too old for the release (CUDA {major}.x needs "
            f"{cuda.driver_text(cuda.DRIVER_FLOORS.get(major, (510,)))} or newer)")
        said = _said(field[0]).rstrip(".")
        return (f"nvidia-smi failed on the host: {said}: its driver predates R510 (no "
                f"compute_cap field) and is {old}: upgrade the host's driver")
    return f"nvidia-smi failed on the host: {_said((lines or [f'exit {r.exit}'])[-1])}" \
        f"{GPU_CHECK_OFF}"


def _said(line: str) -> str:
    return "".join(c if c.isprintable() else "?" for c in line[:200])


def _wanted(settings: Playbook) -> list[int]:
    """The GPUs daemon.gpu_devices names (none: every GPU)."""
    return [int(d) for d in getattr(settings.daemon, "gpu_devices", None) or []]


def _daemon_gpus(look: Look, listed: tuple[Gpu, ...]) -> tuple[list[Gpu], list[str]]:
    want = _wanted(look.settings)
    indexes = [g.ordinal for g in listed]
    missing = [d for d in want if d not in indexes]
    if missing:
        return [], [f"GPU {missing} not listed by nvidia-smi (it lists {indexes or 'none'}; "
                    f"daemon.gpu_devices names them){GPU_CHECK_OFF}"]
    if not listed:
        return [], [f"nvidia-smi lists no GPU{GPU_CHECK_OFF}"]
    return [g for g in listed if not want or g.ordinal in want], []


def _vram_need(settings: Playbook) -> int | None:
    kind = settings.validation.proof_kind
    return proof_kind(kind).vram if kind else None


def _room(r: GpuReport, used: list[Gpu], facts: HostFacts
          ) -> tuple[dict[int, int | None], bool]:
    """Each GPU's memory for the new daemon: free, plus what the daemons the stop stops
    hold there; and whether that is hidden: a daemon runs and nvidia-smi names none of its
    memory (a container hides other processes), so the room is the GPU's total."""
    pids = {p.pid for p in facts.cuzk} | ({facts.daemon.pid} if facts.daemon.pid else set())
    held = r.held(pids)
    hidden = bool(facts.cuzk or facts.daemon.running) and not held
    return {g.ordinal: None if g.free is None else g.total if hidden
            else g.free + held.get(g.uuid, 0) for g in used}, hidden


def _hidden_warning(used: list[Gpu], need: int) -> str:
    """What a check by the GPU's total judged, where free memory is not attributable."""
    each = "; ".join(f"{g.describe()} {format_size(g.total)} total" for g in used)
    return (f"{WARNING}GPU memory judged by each GPU's total ({each}; "
            f"{format_size(need)} needed), the old daemon's share not attributable: "
            "nvidia-smi names none of its processes (a container hides them), so free "
            "memory is not known: another process may hold the rest")


def _gpu_problems(gpu: Gpu, build: CudaBuild, need: int | None, room: int | None,
                  hidden: bool = False) -> list[str]:
    """Why the new daemon cannot prove on this GPU: its driver, its code, its memory."""
    problems = []
    if build.version is not None:
        problems += _driver_problem(gpu, build.version, build.base)
    if build.archs is not None:
        problems += _arch_problem(gpu, build.archs)
    if need is not None and (room is None or gpu.total is None):
        said = ", ".join(f"{k} {v!r}" for k, v in gpu.odd.items() if k.startswith("memory"))
        problems.append(f"{gpu.describe()} reports {said}: its free memory cannot be judged")
    elif need is not None and room is not None and gpu.total is not None and room < need:
        has = f"{format_size(gpu.total)} in all" if hidden else \
            f"{format_size(room)} free of {format_size(gpu.total)}"
        problems.append(f"{gpu.describe()} has {has}; cuzk needs {format_size(need)} on each "
                        "GPU for validate.proof_kind (kinds.yaml vram): free the GPU "
                        "(nvidia-smi shows what holds it)")
    return problems


def _driver_problem(gpu: Gpu, version: tuple[int, int], base: str) -> list[str]:
    major, minor = version
    needed = cuda.driver_needed(version, gpu.compute_cap)
    if needed is None:
        return []  # a CUDA release rollout knows no floor for: noted by _gpus_note
    if gpu.driver is None:
        return [f"{gpu.describe()} reports driver_version "
                f"{gpu.odd.get('driver_version')!r}: it cannot be judged against the "
                f"release's CUDA {major}.{minor} build"]
    if gpu.driver >= needed:
        return []
    return [f"{gpu.describe()} runs driver {cuda.driver_text(gpu.driver)}; the release's "
            f"CUDA {major}.{minor} build ({base}) needs {cuda.driver_text(needed)} or "
            f"newer there ({_floor_why(version, gpu.compute_cap)}): upgrade the "
            "host's driver"]


def _floor_why(version: tuple[int, int], cc: int | None) -> str:
    floor = cuda.DRIVER_FLOORS[version[0]]
    family = cuda.family_of(cc) if cc is not None else None
    why = f"CUDA {version[0]}.x: {cuda.driver_text(floor)}"
    if family is not None and family.driver > floor:
        why += f"; {family.family.split(':')[0]}: {cuda.driver_text(family.driver)}"
    return why


def _arch_problem(gpu: Gpu, archs: list[int]) -> list[str]:
    have = ", ".join(f"sm_{a}" for a in archs)
    if gpu.compute_cap is None:
        return [f"{gpu.describe()} reports compute_cap {gpu.odd.get('compute_cap')!r}: "
                f"whether the release's code ({have}) runs there cannot be judged"]
    if cuda.runs_on(archs, gpu.compute_cap):
        return []
    cc = gpu.compute_cap
    return [f"{gpu.describe()} is compute capability {cc // 10}.{cc % 10} (sm_{cc}); the "
            f"release has code for {have} only (build.cuda_archs): cuzk would fail there "
            f"with \"no kernel image\"; build with {cc} in build.cuda_archs"]


def _gpus_note(used: list[Gpu], build: CudaBuild, need: int | None, hidden: bool) -> str:
    note = f"GPUs {[g.ordinal for g in used]} present"
    drivers = sorted({cuda.driver_text(g.driver) for g in used if g.driver})
    if build.version is None:
        note += "; no driver check (the release names no CUDA version: no CUDA_BASE)"
    elif build.version[0] not in cuda.DRIVER_FLOORS:
        note += f"; no driver check (CUDA {build.version[0]}: no floor known to rollout)"
    else:
        note += f", driver {'/'.join(drivers)} runs CUDA {build.version[0]}.{build.version[1]}"
    if build.archs is not None:
        note += f", code for {', '.join(f'sm_{a}' for a in build.archs)} runs on them"
    elif build.unread:
        note += f"; no architecture check (CUDA_ARCHS {build.unread!r} names none rollout knows)"
    if need is None:
        note += "; free GPU memory not checked (no validate.proof_kind)"
    elif hidden:
        note += f", {format_size(need)} within each GPU's total (free memory not known)"
    else:
        note += f", {format_size(need)} free on each"
    return note


def missing_libraries(ldd_output: str) -> list[str]:
    """The "not found" lines of ldd: libraries, and symbol versions such as GLIBC_2.34."""
    return [line.strip() for line in ldd_output.splitlines() if "not found" in line]


def ldd_facts(target: Target) -> list[Fact]:
    if target.release is None:
        return []
    names: list[JSON] = [a.name for a in target.release.artifacts]
    where = target.layout.release_dir(target.release.id)
    return [Fact("ldd", {"directory": where, "names": names}, timeout=60)]


def check_executables(look: Look, notes: list[str]) -> list[str]:
    """The uploaded executables load here: ldd finds every library they need. Not there when
    the plan was made: judged when the step runs (after the upload, they are there)."""
    later = "executables not on the host yet: checked after the upload"
    if look.release is None:
        notes.append(later)
        return []
    (fact,) = ldd_facts(look.target)
    if look.read_base and not _release_on_host(look.target, look.facts):
        look.acting()  # while deciding: Later (after an upload, it is there)
        look.read(fact)  # the plan's read (gathered with its facts), as the plan lists it
        notes.append(later)  # the plan's facts, nothing acted since: still not there
        return []
    r = OutputsReport.parse(look.read(fact))  # one round trip
    if r.outcome == "missing":
        notes.append(later)
        return []
    if r.outcome == "no-ldd":
        notes.append("no ldd on the host: libraries not checked")
        return []
    problems = []
    for name, out in r.outputs.items():
        problems += [f"{name} needs {m}" for m in missing_libraries(out)]
    if not problems:
        notes.append("executables load (ldd)")
    return problems


ROLLOUTS_OWN = ("supervisor.py", "guard.py")  # parents that are rollout's own
HAND_OVER = (
    "whatever its restart delay, it would start cuzk again behind rollout's supervisor: hand "
    "it over first (docs/adopt.md, 'A parent that respawns it': change it so it no longer "
    "starts cuzk, restart only it so the running cuzk is orphaned), then rerun with --adopt"
)


def respawner(p: ProcessFacts) -> Parent | None:
    """The process that would start a foreign daemon again, found by what it is, not by
    timing: its parent, unless that is rollout's own or the container's init (pid 1) that
    does not run the daemon's program itself (an orphan's reaper, a shell that polls
    cuzk-bench or tails the log: the host's facts read its text, ops.facts what_it_is);
    None when there is none."""
    parent = p.parents[0] if p.parents else None
    if parent is None or parent.program in ROLLOUTS_OWN:
        return None
    return parent if parent.pid != 1 or parent.starts_cuzk else None


def respawners(facts: HostFacts) -> list[str]:
    """Each foreign daemon's respawning parent, and each shell loop whose command runs the
    daemon's program (cuzk-daemon or cuzk in a command's executable position, as the host's
    facts read it; never a loop of cuzk-bench or one that reads the log): one between two
    restarts has no daemon to find it by."""
    problems, named = [], set()
    for p in facts.foreign_daemons:
        parent = respawner(p)
        if parent is not None:
            named.add(parent.pid)
            problems.append(f"cuzk daemon pid {p.pid} ({p.cmdline or p.exe or '?'}) is started "
                            f"by {parent.describe()}, which is not rollout's supervisor: "
                            + HAND_OVER)
    for loop in facts.cuzk_loops:
        if loop.pid not in named:
            problems.append(f"a shell that starts cuzk runs: {loop.describe()}; " + HAND_OVER)
    return problems


def check_ownership(look: Look, notes: list[str]) -> list[str]:
    """No cuzk daemon runs that rollout's supervisor does not own (unless adopt), nothing
    would start one behind the supervisor (a respawning parent, a shell loop: adopt or
    not), and no other process holds the daemon's ports: checked, never assumed."""
    adopt, facts = look.settings.preflight.adopt, look.facts
    problems = respawners(facts)
    foreign = {p.pid: p for p in facts.foreign_daemons}
    for p in foreign.values():
        held = [str(port) for port, owners in sorted(facts.port_owners.items())
                if any(o.pid == p.pid for o in owners)]
        ports = f"holding port(s) {', '.join(held)}" if held else "holding none of its ports"
        if adopt and p.starttime is None:  # the stop refuses it the same way
            problems.append(cannot_adopt(p))
            continue
        if adopt:
            notes.append(f"will adopt daemon {p.describe()}, {ports}")
            continue
        problems.append(f"a cuzk daemon runs that rollout's supervisor does not own: "
                        f"{p.describe()}, {ports}; rerun with --adopt to take it over")
    for port, o in facts.port_strangers():
        if o.pid not in foreign and not facts.ours(o.pid):
            problems.append(f"port {port} is held by {o.describe()}, not by a cuzk daemon: "
                            "free the port (a cuzk daemon there: rerun with --adopt)")
    if not problems and not foreign:
        notes.append("no daemon but the supervisor's; ports free or ours")
    return problems


def marker_facts(target: Target) -> list[Fact]:
    marker = target.settings.preflight.host_marker
    return [Fact("file_present", {"path": marker})] if marker else []


def check_host_marker(look: Look, notes: list[str]) -> list[str]:
    """`preflight.host_marker`: this playbook runs only on hosts that have this file (the lab
    playbook names the one every lab host has, so the stand-in never reaches a real host)."""
    marker = look.settings.preflight.host_marker
    if not marker:
        return []
    (fact,) = marker_facts(look.target)
    if Report.parse(look.read(fact)).outcome != "present":
        return [
            f"{look.name} is not a host this playbook may run on: {marker} is missing "
            "(preflight.host_marker: the lab playbook runs only on lab hosts)"
        ]
    notes.append(f"{marker} present")
    return []


def root_facts(target: Target) -> list[Fact]:
    config, proof_input = target.settings.daemon.config_path, target.settings.validation.input.path
    paths: list[JSON] = [config, f"{config}.new", proof_input, f"{proof_input}.partial"]
    return [Fact("check_root", {"root": target.layout.root, "paths": paths}, timeout=60)]


def check_files(look: Look, notes: list[str]) -> list[str]:
    """Before root acts under the root: the root, rollout/, releases/ and supervisor.py owned
    by root and not group- or world-writable; no symbolic link under rollout/, in releases/,
    in place of the config, the validation input or their temporaries; `current` pointing
    into releases/."""
    (fact,) = root_facts(look.target)
    out = look.read(fact)
    found = out.get("problems")
    if not isinstance(found, list) or out.get("outcome") not in ("clean", "problems"):
        return [f"the check of the files under {look.layout.root} gave no answer: "
                f"{out!r:.200}"]
    if found:
        return [f"refused: {str(p)[:300]}" for p in found[:10]]
    notes.append(f"no link or foreign owner under {look.layout.root}")
    return []


def check_param_files(look: Look, notes: list[str]) -> list[str]:
    notes.append(check_params(look.acting()))  # raises StepFailed naming what is missing
    return []


def check_input(look: Look, notes: list[str]) -> list[str]:
    notes.append(ensure_input(look.acting()))
    return []


CHECKS: dict[str, Check] = {
    "host": check_host_marker,
    "files": check_files,
    "ownership": check_ownership,
    "space": check_space,
    "budget": check_budget,
    "cpu": check_cpu,
    "gpus": check_gpus,
    "executables": check_executables,
    "c1": check_c1_ids,  # before staging: a wrong C1 is refused before 47 GiB of params
    "params": check_param_files,
    "pce": check_pce_space,  # after staging in the order (read with the plan's facts)
    "input": check_input,
}
def work_facts(reads: Callable[[Any], list[tuple[str, JSONObject]]]
               ) -> Callable[[Target], list[Fact]]:
    """The first reads of a check that acts (they read only the target's settings)."""
    return lambda target: [Fact(name, kwargs, timeout=60) for name, kwargs in reads(target)]


FACTS: dict[str, Callable[[Target], list[Fact]]] = {
    "host": marker_facts, "files": root_facts, "cpu": cpu_facts, "gpus": gpu_facts,
    "executables": ldd_facts, "c1": c1_facts, "params": work_facts(probe_reads),
    "pce": pce_facts, "input": work_facts(input_reads),
}
"""The reads each check makes, gathered with the plan's facts (those of a check that acts
are handed to it when it runs)."""
STAGING = ("params", "input")  # work: not for a host that cannot take the release anyway


def check_names(params: PreflightParams) -> list[str]:
    return list(params.checks or CHECKS)


def facts_of(target: Target, names: Sequence[str]) -> list[Fact]:
    """The reads of these checks, where each can say them ahead (a setting it cannot use
    is left for its check to refuse)."""
    found: list[Fact] = []
    for name in names:
        with contextlib.suppress(StepFailed):
            found += FACTS[name](target) if name in FACTS else []
    return found


def needs(target: Target, params: PreflightParams) -> list[Fact]:
    """The facts preflight's checks judge from (Kind.facts)."""
    return facts_of(target, check_names(params))


def reads_ahead(ctx: HostContext, names: Sequence[str]) -> list[tuple[str, JSONObject]]:
    """The reads of the checks judged now that the plan's facts do not hold: the others are
    handed over as they are (each later call of the same read takes its report, once)."""
    missing: list[tuple[str, JSONObject]] = []
    for fact in facts_of(ctx.target, names):
        known = ctx.state.facts.read(fact.name, fact.kwargs) if ctx.state.facts else None
        if known is None:
            missing.append((fact.name, fact.kwargs))
        else:
            ctx.read_ahead[fact.key] = known
    return missing


class Verdict(NamedTuple):
    """One check's judgement: the problems it found and its notes."""

    problems: tuple[str, ...]
    notes: tuple[str, ...]


@dataclass(frozen=True)
class Checks:
    """What preflight's decide fixed for its apply: the checks, in order, and the verdicts
    of those the plan's facts judged (the others are judged when the step runs)."""

    names: tuple[str, ...]
    decided: dict[str, Verdict]

    @property
    def later(self) -> tuple[str, ...]:
        return tuple(n for n in self.names if n not in self.decided)


def judge(look: Look, names: tuple[str, ...], decided: dict[str, Verdict]
          ) -> dict[str, Verdict]:
    """Each check's verdict in order (given ones kept), none after a staging check once a
    problem is found; while deciding, a check the facts cannot judge is left out (Later)."""
    out: dict[str, Verdict] = {}
    for name in names:
        if name in STAGING and any(v.problems for v in out.values()):
            break  # staging params and input is work: not for a host that cannot take it
        verdict = decided.get(name)
        if verdict is None:
            notes: list[str] = []
            try:
                problems = CHECKS[name](look, notes)
            except Later:
                continue
            verdict = Verdict(tuple(problems), tuple(notes))
        out[name] = verdict
    return out


def _answer(facts: HostFacts, reads: list[tuple[str, JSONObject]]) -> JSONObject | None:
    """The plan's report of a check's one read (None: none, or not gathered)."""
    return facts.read(*reads[0]) if reads else None


WORK: dict[str, Callable[[Target, HostFacts], list[Call]]] = {
    "params": lambda target, facts: params_calls(target, _answer(facts, probe_reads(target))),
    "input": lambda target, facts: input_calls(target, _answer(facts, input_reads(target))),
}
"""The calls of the checks that stage (params, input), worked out from their first read."""


def later_calls(target: Target, facts: HostFacts, names: Sequence[str]) -> tuple[Call, ...]:
    """The host calls of the checks judged when the step runs, in their order: each one's
    reads, and the staging the plan's facts show it will do."""
    calls: list[Call] = []
    for name in names:
        if name in WORK:
            with contextlib.suppress(StepFailed):  # a setting its check refuses
                calls += WORK[name](target, facts)
        else:
            calls += [Call(f.name, f.kwargs) for f in facts_of(target, [name])]
    return tuple(calls)


def decide(facts: HostFacts, target: Target, params: PreflightParams) -> Decision:
    """The checks the plan's facts can judge, judged here: a problem refuses the host in the
    plan; the rest (work, or executables not there yet) are judged when the step runs."""
    names = tuple(check_names(params))
    verdicts = judge(Look(target, facts), names, {})
    summary = f"check {', '.join(names)}, before anything changes"
    problems = [p for v in verdicts.values() for p in v.problems]
    if problems:
        return Action(summary, params, Checks(names, verdicts), fails="; ".join(problems))
    later = [n for n in names if n not in verdicts]
    if later:
        summary += f" ({', '.join(later)} judged when it runs)"
    return Action(summary, params, Checks(names, verdicts),
                  calls=later_calls(target, facts, later))


def apply(ctx: HostContext, action: Action) -> StepResult:
    """The verdicts decide made, and the checks left to the run judged now: from the plan's
    facts when no action ran since, else read afresh (after an upload, the release is there
    for the executables check)."""
    checks = action.detail_as(Checks)
    look = Look.running(ctx, ctx.state.facts)
    ctx.prefetch(reads_ahead(ctx, checks.later))
    try:
        verdicts = judge(look, checks.names, checks.decided)
    finally:
        ctx.forget_reads()  # never read by a later step: the host moves on
    problems = [p for v in verdicts.values() for p in v.problems]
    if problems:
        raise StepFailed("; ".join(problems), retryable=False)
    notes = [n for v in verdicts.values() for n in v.notes]
    for note in notes:
        if note.startswith(WARNING) and ctx.emit is not None:  # a budget that costs the host
            ctx.emit("warning", reason=note, data={"step": "preflight"})
    return ok("; ".join(notes))


KIND = Kind("preflight", PreflightParams, KindRule("untouched"), place=10, decide=decide,
            apply=apply, facts=needs, checks_changes=True)
