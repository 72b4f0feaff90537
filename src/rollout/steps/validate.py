"""Prove the daemon works: a validation proof whose result line, not exit code, decides."""

from __future__ import annotations

import hashlib
import re
from pathlib import Path
from typing import Any

from rollout.errors import StepFailed
from rollout.events import StepResult, ok
from rollout.layout import q
from rollout.steps.base import HostContext


def _sha256_on_host(ctx: HostContext, path: str) -> str | None:
    r = ctx.sh(f"sha256sum -- {q(path)} 2>/dev/null")
    return r.stdout.split()[0] if r.ok and r.stdout else None


def ensure_input(ctx: HostContext) -> str:
    """The validation input is on the host with the expected sha256; stage it if not."""
    spec = ctx.settings.validation.input
    source = Path(spec.source) if spec.source else None
    want = spec.sha256 or (hashlib.sha256(source.read_bytes()).hexdigest() if source else None)
    have = _sha256_on_host(ctx, spec.path)
    if have and (want is None or have == want):
        return f"input {spec.path} present"
    if source is None:
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


def validate(ctx: HostContext, params: dict[str, Any]) -> StepResult:
    spec = ctx.settings.validation
    staged = ensure_input(ctx)
    command = ctx.render_command(params.get("command", spec.command))
    pattern = re.compile(params.get("success_pattern", spec.success_pattern), re.MULTILINE)
    r = ctx.sh(command, timeout=float(params.get("timeout", 600)))
    output = (r.stdout + r.stderr)[-4000:]
    if pattern.search(r.stdout):
        job = re.search(r"^job_id:\s*(\S+)", r.stdout, re.MULTILINE)
        return ok(
            f"validation proof COMPLETED ({staged})",
            job_id=job.group(1) if job else None,
            output_tail=output[-1000:],
        )
    error = re.search(r"^error:\s*(.+)$", r.stdout, re.MULTILINE)
    why = error.group(1) if error else f"no line matching {pattern.pattern!r} (exit {r.exit_code})"
    raise StepFailed(f"validation failed: {why}", output=output)
