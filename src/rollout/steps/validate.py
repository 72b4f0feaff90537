"""Prove the daemon works: a validation proof whose result line, not exit code, decides."""

from __future__ import annotations

import hashlib
import json
import re
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

from rollout.config.steps import ValidateParams
from rollout.errors import StepFailed
from rollout.host.facts import HostFacts
from rollout.host.layout import is_release_id, q
from rollout.output.events import StepResult, ok
from rollout.secrets import tail
from rollout.steps.base import HostContext
from rollout.steps.daemon import already_validated, status_url
from rollout.steps.decision import Action, Decision, Target
from rollout.steps.identity import check_ports
from rollout.transport.base import RunResult


def _sha256_on_host(ctx: HostContext, path: str) -> str | None:
    r = ctx.sh(f"sha256sum -- {q(path)} 2>/dev/null")
    return r.stdout.split()[0] if r.ok and r.stdout else None


def _size_on_host(ctx: HostContext, path: str) -> int | None:
    r = ctx.sh(f"stat -c %s -- {q(path)} 2>/dev/null")
    return int(r.stdout) if r.ok and r.stdout.strip().isdigit() else None


def ensure_input(ctx: HostContext) -> str:
    """The validation input is on the host with the expected size and sha256 (a real C1,
    not a stand-in); stage it if not."""
    spec = ctx.settings.validation.input
    source = Path(spec.source) if spec.source else None
    if source is not None and spec.size is not None and source.stat().st_size != spec.size:
        raise StepFailed(
            f"validation input source {source} is {source.stat().st_size} bytes, "
            f"validate.input.size says {spec.size}",
            retryable=False,
        )
    want = spec.sha256 or (hashlib.sha256(source.read_bytes()).hexdigest() if source else None)
    size = _size_on_host(ctx, spec.path) if spec.size is not None else None
    have = None if size != spec.size else _sha256_on_host(ctx, spec.path)
    if have and (want is None or have == want):
        return f"input {spec.path} present"
    if source is None:
        if size is not None and size != spec.size:
            problem = f"is {size} bytes, not {spec.size}"
        else:
            problem = "missing" if have is None else f"sha256 {have[:12]} is not {want}"
        raise StepFailed(
            f"validation input {spec.path} {problem} and no source is set", retryable=False
        )
    partial = f"{spec.path}.partial"
    ctx.sh(f"mkdir -p -- {q(spec.path.rsplit('/', 1)[0])}").check()
    ctx.transport.put(str(source), partial, resume=True)
    if _sha256_on_host(ctx, partial) != want:
        ctx.sh(f"rm -f -- {q(partial)}")
        raise StepFailed(f"staged validation input {spec.path}: sha256 mismatch")
    ctx.sh(f"mv -T -- {q(partial)} {q(spec.path)}").check()
    return f"staged input {spec.path} from {source.name}"


KILL_AFTER = 5  # seconds between timeout's SIGTERM and its SIGKILL
TIMED_OUT, KILLED = 124, 137  # timeout's status when it stopped the command (TERM, KILL)


def status_doc(ctx: HostContext) -> dict[str, Any] | None:
    """The daemon's /status (None when the status port is off or does not answer)."""
    listen = ctx.settings.daemon.status_listen
    if not listen:
        return None
    r = ctx.sh(f"curl -fsS --max-time 5 {q(status_url(listen))}", timeout=15)
    try:
        doc = json.loads(r.stdout) if r.ok else None
    except ValueError:
        return None
    return doc if isinstance(doc, dict) else None


def status_counters(ctx: HostContext) -> dict[str, Any] | None:
    """The daemon's /status counters (None when the status port is off or does not answer)."""
    counters = (status_doc(ctx) or {}).get("counters")
    return counters if isinstance(counters, dict) else None


def run_bounded(ctx: HostContext, command: str, seconds: float) -> tuple[RunResult, bool]:
    """Run the validation on the host under `timeout`: a proof that never answers (cuzk-bench
    has no timeout of its own) is stopped there, its whole process group with it. The
    evidence of an earlier validation goes first: only a passing proof writes it again.
    Returns the result and whether it was stopped (hung)."""
    marker = "__rollout_validate_elapsed="
    wrapped = (
        f"rm -f -- {q(ctx.layout.validated)}; "
        f"start=$(date +%s); timeout -k {KILL_AFTER} {seconds:g} sh -c {q(command)}; rc=$?; "
        f'echo "{marker}$(( $(date +%s) - start ))"; exit $rc'
    )
    r = ctx.sh(wrapped, timeout=seconds + KILL_AFTER + 30)
    elapsed = re.search(rf"^{marker}(\d+)$", r.stdout, re.MULTILINE)
    ran = int(elapsed.group(1)) if elapsed else 0
    hung = r.exit_code == TIMED_OUT or (r.exit_code == KILLED and ran >= int(seconds))
    stdout = re.sub(rf"^{marker}\d+\n?", "", r.stdout, flags=re.MULTILINE)
    return replace(r, stdout=stdout), hung


def proved_daemon(ctx: HostContext) -> tuple[int, int, str] | None:
    """(pid, start time, release id) of the daemon the validation ran against: the one the
    start step saw, else the one daemon.pid names now; None when that is not known."""
    line = ctx.state.daemon_line
    if line is None:
        d = ctx.facts().daemon
        line = f"{d.pid} {d.starttime} {d.exe}" if d.running else ""
    parts = line.split(maxsplit=2)
    if len(parts) < 3 or not (parts[0].isdigit() and parts[1].isdigit()):
        return None
    prefix = ctx.layout.releases + "/"
    rid = parts[2].removeprefix(prefix).split("/")[0] if parts[2].startswith(prefix) else ""
    return (int(parts[0]), int(parts[1]), rid) if is_release_id(rid) else None


def record_evidence(ctx: HostContext) -> str:
    """Leave on the host which daemon passed the validation of which release: a rerun skips
    ready and validate only for that same process (pid and start time)."""
    proved = proved_daemon(ctx)
    if proved is None:
        return "no evidence recorded (the daemon validated is not known)"
    pid, starttime, rid = proved
    doc = json.dumps({"release": rid, "pid": pid, "starttime": starttime, "time": time.time()})
    path = ctx.layout.validated
    ctx.sh(f"umask 077 && cat > {q(path)}.new && mv -T -- {q(path)}.new {q(path)}",
           stdin=doc + "\n").check()
    return f"daemon {pid} recorded as validated on {rid}"


def decide(facts: HostFacts, target: Target, params: ValidateParams) -> Decision:
    skip = already_validated(facts, target)
    if skip is not None:
        return skip
    pattern = params.success_pattern or target.settings.validation.success_pattern
    return Action(f"run the validation proof; success is a line matching {pattern!r}", params)


def validate(ctx: HostContext, action: Action) -> StepResult:
    params: ValidateParams = action.params
    spec = ctx.settings.validation
    staged = ensure_input(ctx)
    command = ctx.render_command(params.command or spec.command)
    pattern = re.compile(params.success_pattern or spec.success_pattern, re.MULTILINE)
    seconds = float(spec.timeout if params.timeout is None else params.timeout)
    status = status_doc(ctx)
    check_ports(ctx, status)  # the proof must reach the daemon that was started, no other
    counters = (status or {}).get("counters")
    before = counters if isinstance(counters, dict) else None
    r, hung = run_bounded(ctx, command, seconds)
    output = tail(r.stdout + r.stderr, 4000)
    if hung:
        after = status_counters(ctx)
        raise StepFailed(
            f"validation hung (no result in {seconds:g} s): killed; daemon counters "
            f"before {before}, after {after}",
            retryable=False,
            output=output,
            data={"hung": True, "timeout": seconds, "counters_before": before,
                  "counters_after": after},
        )
    if pattern.search(r.stdout):
        job = re.search(r"^job_id:\s*(\S+)", r.stdout, re.MULTILINE)
        evidence = record_evidence(ctx)
        return ok(
            f"validation proof COMPLETED ({staged}; {evidence})",
            job_id=job.group(1) if job else None,
            output_tail=tail(output, 1000),
        )
    error = re.search(r"^error:\s*(.+)$", r.stdout, re.MULTILINE)
    why = error.group(1) if error else f"no line matching {pattern.pattern!r} (exit {r.exit_code})"
    raise StepFailed(f"validation failed: {why}", output=output)
