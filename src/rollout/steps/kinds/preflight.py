"""Preflight: before anything on a host changes, check that the rollout can succeed there.

Each check is its own function returning the problems it found (empty: fine). The step's
`checks` param picks some of them (default: all); the executables check needs the release
on the host, so a playbook runs it again after the upload, still before the old daemon is
touched: `{name: preflight-executables, kind: preflight, params: {checks: [executables]}}`.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

from pydantic import Field

from rollout.config.steps import KindRule, StrictParams
from rollout.errors import StepFailed
from rollout.host.facts import HostFacts, Parent, ProcessFacts
from rollout.host.reports import CommandReport, OutputsReport, Report, TextReport
from rollout.jsontypes import JSONObject
from rollout.output.events import StepResult, ok
from rollout.steps.base import HostContext, Kind
from rollout.steps.budget import BudgetRule, decide_budget
from rollout.steps.daemon import cannot_adopt
from rollout.steps.decision import Action, Decision, Target
from rollout.steps.params import check_params, probe_reads
from rollout.steps.preflight_inputs import c1_reads, check_c1_ids, check_pce_space, pce_reads
from rollout.steps.validate import ensure_input, input_reads
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

FactCheck = Callable[[HostContext, HostFacts, list[str]], list[str]]
Check = Callable[[HostContext, HostFacts | None, list[str]], list[str]]
"""A check gets the host's facts, or None where no check of its step needs them."""


def _space_needed(ctx: HostContext, facts: HostFacts) -> int:
    if ctx.release is None or _release_on_host(ctx, facts):
        return SPACE_MARGIN
    return 2 * sum(a.size for a in ctx.release.artifacts) + SPACE_MARGIN


def _release_on_host(ctx: HostContext, facts: HostFacts) -> bool:
    return ctx.release is not None and ctx.release.id in facts.release_ids


def check_space(ctx: HostContext, facts: HostFacts, notes: list[str]) -> list[str]:
    problems = []
    root = ctx.layout.root
    if not facts.root_writable:
        problems.append(f"{root} is not writable")
    free = facts.free_bytes
    need = _space_needed(ctx, facts)
    if free is not None and free < need:
        problems.append(
            f"{root} has {format_size(free)} free, the release needs {format_size(need)}"
        )
    if not facts.python:
        problems.append("python3 is missing on the host")
    notes.append(f"{root} writable, {format_size(free)} free")
    return problems


def check_budget(ctx: HostContext, facts: HostFacts, notes: list[str]) -> list[str]:
    """The budget rule (rollout.steps.budget) accepts the host: a budget it can size (no
    cgroup limit: only an explicit daemon.total_budget), under the limit minus the margin,
    and at least what the proof type needs."""
    budget = decide_budget(facts.memory, BudgetRule.of(ctx.settings))
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


def check_cpu(ctx: HostContext, facts: HostFacts, notes: list[str]) -> list[str]:
    want = list(ctx.settings.preflight.cpu_flags)
    if not want:
        return []
    have = cpu_flags(TextReport.parse(ctx.call("cpu_info")).text)
    missing = [f for f in want if f not in have]
    if missing:
        return [
            f"the CPU lacks {', '.join(missing)}, which the build needs (preflight.cpu_flags; "
            "build with cuzk's portable feature for such hosts, and set preflight.cpu_flags "
            "to [] to turn the check off: the default playbook's var cpu_flags)"
        ]
    notes.append(f"CPU has {', '.join(want)}")
    return []


def gpu_indexes(text: str) -> list[int]:
    """Indexes from `nvidia-smi --query-gpu=index,name --format=csv,noheader`."""
    out = []
    for line in text.splitlines():
        head = line.split(",", 1)[0].strip()
        if head.isdigit():
            out.append(int(head))
    return out


GPU_CHECK_OFF = (
    "; a host without GPUs: set preflight.gpus false (in the default playbook, "
    "the host var has_gpu: false)"
)


def check_gpus(ctx: HostContext, facts: HostFacts, notes: list[str]) -> list[str]:
    if not ctx.settings.preflight.gpus:
        notes.append("no GPU check (the host's vars say it has none)")
        return []
    want = [int(d) for d in getattr(ctx.settings.daemon, "gpu_devices", None) or []]
    r = CommandReport.parse(ctx.call("gpus", call_timeout=70, timeout=60))
    if r.exit != 0:
        why = r.output.strip().splitlines()[-1:] or [f"exit {r.exit}"]
        return [f"nvidia-smi failed on the host: {why[0]}{GPU_CHECK_OFF}"]
    listed = gpu_indexes(r.output)
    missing = [d for d in want if d not in listed]
    if missing:
        return [f"GPU {missing} not listed by nvidia-smi (it lists {listed or 'none'}; "
                f"daemon.gpu_devices names them){GPU_CHECK_OFF}"]
    if not listed:
        return [f"nvidia-smi lists no GPU{GPU_CHECK_OFF}"]
    notes.append(f"GPUs {want or listed} present")
    return []


def missing_libraries(ldd_output: str) -> list[str]:
    """The "not found" lines of ldd: libraries, and symbol versions such as GLIBC_2.34."""
    return [line.strip() for line in ldd_output.splitlines() if "not found" in line]


def check_executables(ctx: HostContext, facts: HostFacts | None, notes: list[str]
                      ) -> list[str]:
    """The uploaded executables load here: ldd finds every library they need. Needs no
    facts: without them, its own command looks for the release (exit 4: not there)."""
    later = "executables not on the host yet: checked after the upload"
    if ctx.release is None or (facts is not None and not _release_on_host(ctx, facts)):
        notes.append(later)
        return []
    where = ctx.layout.release_dir(ctx.release.id)
    names = [a.name for a in ctx.release.artifacts]
    r = OutputsReport.parse(ctx.call("ldd", directory=where, names=names))  # one round trip
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
    does not start cuzk itself (an orphan's reaper); None when there is none."""
    parent = p.parents[0] if p.parents else None
    if parent is None or parent.program in ROLLOUTS_OWN:
        return None
    return parent if parent.pid != 1 or parent.starts_cuzk else None


def respawners(facts: HostFacts) -> list[str]:
    """Each foreign daemon's respawning parent, and each shell loop that starts cuzk (one
    between two restarts has no daemon to find it by)."""
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


def check_ownership(ctx: HostContext, facts: HostFacts, notes: list[str]) -> list[str]:
    """No cuzk daemon runs that rollout's supervisor does not own (unless adopt), nothing
    would start one behind the supervisor (a respawning parent, a shell loop: adopt or
    not), and no other process holds the daemon's ports: checked, never assumed."""
    adopt = ctx.settings.preflight.adopt
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


def marker_reads(ctx: HostContext) -> list[tuple[str, JSONObject]]:
    marker = ctx.settings.preflight.host_marker
    return [("file_present", {"path": marker})] if marker else []


def check_host_marker(ctx: HostContext, facts: HostFacts, notes: list[str]) -> list[str]:
    """`preflight.host_marker`: this playbook runs only on hosts that have this file (the lab
    playbook names the one every lab host has, so the stand-in never reaches a real host)."""
    marker = ctx.settings.preflight.host_marker
    if not marker:
        return []
    (action, kwargs), = marker_reads(ctx)
    if Report.parse(ctx.call(action, **kwargs)).outcome != "present":
        return [
            f"{ctx.name} is not a host this playbook may run on: {marker} is missing "
            "(preflight.host_marker: the lab playbook runs only on lab hosts)"
        ]
    notes.append(f"{marker} present")
    return []


def check_files(ctx: HostContext, facts: HostFacts | None, notes: list[str]) -> list[str]:
    """Before root acts under the root: the root, rollout/, releases/ and supervisor.py owned
    by root and not group- or world-writable; no symbolic link under rollout/, in releases/,
    in place of the config, the validation input or their temporaries; `current` pointing
    into releases/."""
    config, proof_input = ctx.settings.daemon.config_path, ctx.settings.validation.input.path
    paths = [config, f"{config}.new", proof_input, f"{proof_input}.partial"]
    _, out = ctx.script("files", "check", "--root", ctx.layout.root,
                        *[a for p in paths for a in ("--path", p)], timeout=60)
    found = out.get("problems") if isinstance(out, dict) else None
    if not isinstance(found, list):
        return [f"the check of the files under {ctx.layout.root} gave no answer: {out!r:.200}"]
    if found:
        return [f"refused: {str(p)[:300]}" for p in found[:10]]
    notes.append(f"no link or foreign owner under {ctx.layout.root}")
    return []


def check_param_files(ctx: HostContext, facts: HostFacts, notes: list[str]) -> list[str]:
    notes.append(check_params(ctx))  # raises StepFailed naming what is missing
    return []


def check_input(ctx: HostContext, facts: HostFacts, notes: list[str]) -> list[str]:
    notes.append(ensure_input(ctx))
    return []


def with_facts(check: FactCheck) -> Check:
    """A check that reads the host's facts (apply() reads them once for all such checks)."""

    def run(ctx: HostContext, facts: HostFacts | None, notes: list[str]) -> list[str]:
        return check(ctx, facts if facts is not None else ctx.facts(), notes)

    return run


CHECKS: dict[str, Check] = {
    "host": with_facts(check_host_marker),
    "files": check_files,
    "ownership": with_facts(check_ownership),
    "space": with_facts(check_space),
    "budget": with_facts(check_budget),
    "cpu": with_facts(check_cpu),
    "gpus": with_facts(check_gpus),
    "executables": check_executables,
    "c1": check_c1_ids,  # before staging: a wrong C1 is refused before 47 GiB of params
    "params": with_facts(check_param_files),
    "pce": check_pce_space,  # after staging: the room left once the params are there
    "input": with_facts(check_input),
}
READS: dict[str, Callable[[HostContext], list[tuple[str, JSONObject]]]] = {
    "host": marker_reads, "c1": c1_reads, "params": probe_reads, "pce": pce_reads,
    "input": input_reads,
}
"""The host reads a check makes whatever the others find: read ahead in one round trip."""
FACTLESS = frozenset({"executables", "files"})  # checks whose own command looks: no facts read
STAGING = ("params", "input")  # work: not for a host that cannot take the release anyway


def reads_ahead(ctx: HostContext, checks: tuple[str, ...]) -> list[tuple[str, JSONObject]]:
    """The reads of these checks, where each can say them ahead (a setting it cannot use
    is left for its check to refuse)."""
    reads: list[tuple[str, JSONObject]] = []
    for name in checks:
        with contextlib.suppress(StepFailed):
            reads += READS[name](ctx) if name in READS else []
    return reads


@dataclass(frozen=True)
class Checks:
    """What preflight's decide fixed for its apply: the checks to run, in order."""

    names: tuple[str, ...]


def decide(facts: HostFacts, target: Target, params: PreflightParams) -> Decision:
    names = list(params.checks or CHECKS)
    return Action(f"check {', '.join(names)}, before anything changes", params,
                  Checks(tuple(names)))


def apply(ctx: HostContext, action: Action) -> StepResult:
    """The checks look at the host as it is now: fresh facts (after an upload, the release
    is there for the executables check); the plan's own facts when no action ran since;
    none read for checks that look for themselves (executables after the upload)."""
    checks = action.detail_as(Checks).names
    facts = ctx.state.facts
    if facts is None and not FACTLESS.issuperset(checks):
        facts = ctx.facts()
    notes: list[str] = []
    problems: list[str] = []
    ctx.prefetch(reads_ahead(ctx, checks))
    try:
        for name in checks:
            if name in STAGING and problems:
                break  # staging params and input is work: not for a host that cannot take it
            problems += CHECKS[name](ctx, facts, notes)
    finally:
        ctx.forget_reads()  # never read by a later step: the host moves on
    if problems:
        raise StepFailed("; ".join(problems), retryable=False)
    return ok("; ".join(notes))


KIND = Kind("preflight", PreflightParams, KindRule("untouched"), place=10, decide=decide,
            apply=apply)
