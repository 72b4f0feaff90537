"""Prove the daemon works: a validation proof whose result block (one, on stdout), not its
exit code, decides."""

from __future__ import annotations

import functools
import hashlib
import json
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Protocol

from rollout.config.render import Command, render_command
from rollout.config.sections import InputSpec
from rollout.errors import StepFailed
from rollout.host.layout import is_release_id
from rollout.host.reports import BudgetWait, InputReport, ProbeReport, ProveReport, Report
from rollout.jsontypes import JSONObject
from rollout.readfile import open_regular
from rollout.steps.base import HostContext
from rollout.steps.budget_wait import watch_for
from rollout.steps.daemon import status_url
from rollout.steps.decision import Call, Release, Target, write_call
from rollout.steps.identity import daemon_ports, ports_query
from rollout.steps.proof_budget import budget_too_small, budget_total
from rollout.steps.transfer import put_call, put_file
from rollout.transport.base import RunResult


def validation_command(target: Target, template: Command, release_id: str | None) -> str:
    """The validation command rendered for `release_id`: its own bench, at its own paths
    (`release_dir`, `release_id`); None: whatever `current` points at. The one place the
    validate step, a rollback's validation and the guard's recipe get their command from.
    A string or an argv list; validate.env's values reach it as environment variables."""
    release = Release(release_id, "", "", ()) if release_id else None
    context = replace(target, release=release).template_context()
    where = target.settings.location("validate", "command")
    return render_command(template, target.settings.validation.env, context, where)


def input_reads(target: HostContext | Target) -> list[tuple[str, JSONObject]]:
    """The read ensure_input makes (ops.input_check): the input's size and sha256."""
    spec = target.settings.validation.input
    return [("input_check", {"path": spec.path, "size": spec.size})]


def _wanted(spec: InputSpec) -> str | None:
    """The input's expected sha256: validate.input.sha256, else its source's (hashed once a
    run, while the file keeps its size and time); None: any content will do."""
    if not spec.source:
        return spec.sha256
    source = Path(spec.source)
    seen = source.stat()
    if spec.size is not None and seen.st_size != spec.size:
        raise StepFailed(f"validation input source {source} is {seen.st_size} bytes, "
                         f"validate.input.size says {spec.size}", retryable=False)
    return spec.sha256 or _source_sha256(str(source), seen.st_size, seen.st_mtime_ns)


@functools.cache
def _source_sha256(path: str, size: int, mtime_ns: int) -> str:
    digest = hashlib.sha256()
    with open_regular(path, "validation input source") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _staged(spec: InputSpec, want: str | None, seen: InputReport) -> tuple[Call, ...] | None:
    """The calls that stage the input where the host's copy is not the one wanted (None: it
    is); StepFailed where it is not and there is no source to stage it from."""
    size, have = seen.size, seen.sha256
    if have and (want is None or have == want):
        return None
    if not spec.source:
        if size is not None and spec.size is not None and size != spec.size:
            problem = f"is {size} bytes, not {spec.size}"
        else:
            problem = "missing" if have is None else f"sha256 {have[:12]} is not {want}"
        raise StepFailed(
            f"validation input {spec.path} {problem} and no source is set", retryable=False
        )
    folder, partial = spec.path.rsplit("/", 1)[0] or "/", f"{spec.path}.partial"
    return (Call("make_folder", {"path": folder}), put_call(partial),
            Call("stage_input", {"partial": partial, "path": spec.path, "sha256": want or ""}))


def input_calls(target: Target, seen: JSONObject | None) -> list[Call]:
    """The calls ensure_input makes on a host whose ops.input_check answered `seen` (None:
    not read yet, the read alone): the read, then the staging where it is needed. A
    staging the plan cannot work out (a source that does not read) is left to the run."""
    calls = [Call(name, kwargs) for name, kwargs in input_reads(target)]
    if seen is None:
        return calls
    spec = target.settings.validation.input
    try:
        staging = _staged(spec, _wanted(spec), InputReport.parse(seen))
    except (StepFailed, OSError):
        return calls
    return calls + list(staging or ())


def ensure_input(ctx: HostContext, seen: InputReport | None = None) -> str:
    """The validation input is on the host with the expected size and sha256 (a real C1,
    not a stand-in); stage it if not. `seen`: what ops.input_check said, where it ran in an
    earlier call (ops.probe)."""
    spec = ctx.settings.validation.input
    want = _wanted(spec)
    if seen is None:
        (action, kwargs), = input_reads(ctx)
        seen = InputReport.parse(ctx.call(action, **kwargs))
    staging = _staged(spec, want, seen)
    if staging is None:
        return f"input {spec.path} present"
    _stage_input(ctx, Path(str(spec.source)), staging)
    return f"staged input {spec.path} from {Path(str(spec.source)).name}"


def _stage_input(ctx: HostContext, source: Path, calls: tuple[Call, ...]) -> None:
    """Its folder, the upload beside the input, then ops.stage_input: checked, renamed."""
    folder, put, stage = calls
    path = str(stage.kwargs["path"])
    made = Report.parse(ctx.run_call(folder))
    if made.outcome not in ("made", "kept"):
        raise StepFailed(f"staged validation input {path}: {made.reason}", retryable=False)
    put_file(ctx, str(source), str(put.kwargs["path"]), "input")
    staged = Report.parse(ctx.run_call(stage))
    if staged.outcome == "mismatch":
        raise StepFailed(f"staged validation input {path}: sha256 mismatch ({staged.reason})")
    if staged.outcome != "staged":
        raise StepFailed(f"staged validation input {path}: {staged.reason}", retryable=False)


KILL_AFTER = 5  # seconds between timeout's SIGTERM and its SIGKILL
TIMED_OUT, KILLED = 124, 137  # timeout's status when it stopped the command (TERM, KILL)


def probe(ctx: HostContext) -> ProbeReport:
    """What validate reads ahead of the proof, in one call (ops.probe): the input check,
    /status (None when the status port is off or does not answer) and the ports' owners."""
    _, pid = ports_query(ctx)
    return ProbeReport.parse(ctx.run_call(probe_call(ctx.target).plus(pid=pid)))


def probe_call(target: Target) -> Call:
    """ops.probe (the started daemon's pid added at run time)."""
    spec = target.settings.validation.input
    listen = target.settings.daemon.status_listen
    return Call("probe", {"input_path": spec.path, "input_size": spec.size,
                          "status_url": status_url(listen) if listen else "",
                          "ports": daemon_ports(target)}, 45, runtime=("pid",))


@dataclass(frozen=True)
class Proof:
    result: RunResult  # the proof's exit code and output
    hung: bool  # stopped by its timeout
    status_after: dict[str, Any] | None  # /status after a proof that was stopped
    recorded: bool  # the host wrote the evidence (a line matched the pattern there)
    budget_wait: BudgetWait | None = None  # stopped because its job waited for budget
    report: JSONObject = field(default_factory=dict)  # ops.prove's, as the host gave it


def prove_call(target: Target, command: str, seconds: float, pattern: str = "",
               release_id: str | None = None, require_executable: bool = False) -> Call:
    """ops.prove: the validation under `timeout` on the host, in one round trip (cuzk-bench
    has no timeout of its own: a proof that never answers is stopped there, its whole
    process group with it, and so is one whose job waits for the daemon's budget:
    steps/budget_wait.py). The evidence of an earlier validation goes first; only a proof
    whose output matches `pattern` writes the run's record again (added by the apply).
    require_executable: never run a bench that is not on the host."""
    settings = target.settings
    listen = settings.daemon.status_listen if settings is not None else ""
    return Call("prove", {
        "command": command, "timeout": seconds, "kill_after": float(KILL_AFTER),
        "evidence": target.layout.validated, "pattern": pattern,
        "status_url": status_url(listen) if listen else "",
        "watch": watch_for(settings) if listen else None, "release": release_id or "",
        "require_executable": require_executable,
    }, seconds + float(KILL_AFTER) + 30, runtime=("record",))


class ProofParams(Protocol):
    """A validate step's own proof settings (its params), over validate.*."""

    @property
    def command(self) -> Command | None: ...
    @property
    def success_pattern(self) -> str | None: ...
    @property
    def timeout(self) -> float | None: ...


def validation_call(target: Target, params: ProofParams, release_id: str | None,
                    require_executable: bool = False) -> Call:
    """The proof a validate step makes: its own command rendered for `release_id` (None:
    whatever current points at), its pattern and timeout over the playbook's."""
    spec = target.settings.validation
    command = validation_command(target, params.command or spec.command, release_id)
    seconds = float(spec.timeout if params.timeout is None else params.timeout)
    return prove_call(target, command, seconds, params.success_pattern or spec.success_pattern,
                      release_id, require_executable)


def run_bounded(ctx: HostContext, command: str, seconds: float, pattern: str = "",
                record: str = "") -> Proof:
    """The validation `command` run on the host under `timeout` (see prove_call)."""
    call = prove_call(ctx.target, command, seconds, pattern, ctx.target.release_id)
    return run_proof(ctx, call.plus(record=record))


def run_proof(ctx: HostContext, call: Call) -> Proof:
    out = ctx.run_call(call)
    report = ProveReport.parse(out)
    timeout = call.kwargs.get("timeout")
    seconds = float(timeout) if isinstance(timeout, int | float) else 0.0
    code = report.exit
    waited = report.budget_wait
    hung = waited is None and (
        code == TIMED_OUT or (code == KILLED and report.elapsed >= seconds))
    result = RunResult("validation", code, report.stdout, report.stderr)
    return Proof(result, hung, report.status_after, report.recorded, waited, out)


def proved_daemon(ctx: HostContext) -> tuple[int, int, str] | None:
    """(pid, start time, release id) of the daemon the validation ran against: the one the
    start step saw, else the one daemon.pid names now; None when that is not known."""
    line = ctx.state.started.line if ctx.state.started else None
    if line is None:
        d = ctx.facts().daemon
        line = f"{d.pid} {d.starttime} {d.exe}" if d.running else ""
    parts = line.split(maxsplit=2)
    if len(parts) < 3 or not (parts[0].isdigit() and parts[1].isdigit()):
        return None
    prefix = ctx.layout.releases + "/"
    rid = parts[2].removeprefix(prefix).split("/")[0] if parts[2].startswith(prefix) else ""
    return (int(parts[0]), int(parts[1]), rid) if is_release_id(rid) else None


def evidence_doc(ctx: HostContext) -> tuple[str, str]:
    """(the evidence to leave on the host: which daemon passed the validation of which
    release, so a rerun skips ready and validate only for that same process (pid and start
    time); what that says). The evidence is empty where the daemon is not known."""
    proved = proved_daemon(ctx)
    if proved is None:
        return "", "no evidence recorded (the daemon validated is not known)"
    pid, starttime, rid = proved
    doc = json.dumps({"release": rid, "pid": pid, "starttime": starttime, "time": time.time()})
    return doc, f"daemon {pid} recorded as validated on {rid}"


def record_evidence(ctx: HostContext, doc: str) -> None:
    ctx.write(write_call(ctx.layout.validated, doc + "\n", if_changed=False))


def fail_if_budget_too_small(status: dict[str, Any] | None, kind: str | None) -> None:
    """A proof the daemon's whole budget cannot hold would wait in cuzk's acquire until
    validate.timeout: fail the validation now, with that cause (issue 17)."""
    cause = budget_too_small(status, kind)
    if cause is not None:
        raise StepFailed(f"validation cannot run: {cause}", retryable=False,
                         data={"budget_total": budget_total(status), "proof_kind": kind})
