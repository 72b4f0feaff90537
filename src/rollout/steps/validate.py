"""Prove the daemon works: a validation proof whose result line, not exit code, decides."""

from __future__ import annotations

import re
from typing import Any

from rollout.errors import StepFailed
from rollout.events import StepResult, ok
from rollout.steps.base import HostContext


def validate(ctx: HostContext, params: dict[str, Any]) -> StepResult:
    spec = ctx.settings.validation
    command = ctx.render(params.get("command", spec.command))
    pattern = re.compile(params.get("success_pattern", spec.success_pattern), re.MULTILINE)
    r = ctx.sh(command, timeout=float(params.get("timeout", 600)))
    output = (r.stdout + r.stderr)[-4000:]
    if pattern.search(r.stdout):
        job = re.search(r"^job_id:\s*(\S+)", r.stdout, re.MULTILINE)
        return ok("validation proof COMPLETED", job_id=job.group(1) if job else None,
                  output_tail=output[-1000:])
    error = re.search(r"^error:\s*(.+)$", r.stdout, re.MULTILINE)
    why = error.group(1) if error else f"no line matching {pattern.pattern!r} (exit {r.exit_code})"
    raise StepFailed(f"validation failed: {why}", output=output)
