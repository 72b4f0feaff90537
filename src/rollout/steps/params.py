"""Proof parameters in param_cache, checked (and staged) by preflight before the old daemon is
touched: cuzk reads them only at its first proof, so without this check a host would be
stopped, switched and only then fail its validation with "SRS param file not found"."""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rollout.errors import StepFailed
from rollout.host.layout import q
from rollout.steps.base import HostContext
from rollout.steps.transfer import put_file, run_watched
from rollout.units import format_size, parse_size

_URL = re.compile(r"^https?://")

# Sizes of the manifest's files, whether the PCE file is there, and the free bytes of the
# nearest existing folder of param_cache; one JSON line. Arguments: param_cache, pce, names.
_PROBE = r"""
import json, os, sys
cache, pce, names = sys.argv[1], sys.argv[2], sys.argv[3:]
def size(name):
    try:
        return os.stat(os.path.join(cache, name)).st_size
    except OSError:
        return None
where = cache
while not os.path.isdir(where) and where not in ("", "/"):
    where = os.path.dirname(where)
st = os.statvfs(where or "/")
print(json.dumps({"sizes": {n: size(n) for n in names}, "partial": {n: size(n + ".partial")
    for n in names}, "pce": size(pce) is not None, "free": st.f_bavail * st.f_frsize}))
"""


@dataclass(frozen=True)
class Problem:
    name: str
    found: int | None
    expected: int | None

    def __str__(self) -> str:
        if self.found is None:
            return f"{self.name} (missing)"
        want = f"{self.expected} bytes" if self.expected else "a non-empty file"
        return f"{self.name} ({self.found} bytes, expected {want})"


def _probe(ctx: HostContext) -> dict[str, Any]:
    spec, cache = ctx.settings.params, ctx.settings.daemon.param_cache
    names = [f.name for f in spec.files]
    r = ctx.run_python(_PROBE, cache, spec.pce_file, *names, timeout=30)
    try:
        out = json.loads(r.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError) as e:
        raise StepFailed(f"cannot read param_cache {cache}: {r.stderr.strip()[-300:]}") from e
    return out if isinstance(out, dict) else {}


def _problems(ctx: HostContext, sizes: dict[str, Any]) -> list[Problem]:
    problems = []
    for f in ctx.settings.params.files:
        found = sizes.get(f.name)
        if found is None or found == 0 or (f.size is not None and found != f.size):
            problems.append(Problem(f.name, found, f.size))
    return problems


def check_params(ctx: HostContext) -> str:
    """The proof type's files are in param_cache with their sizes (staged from params.source
    when not), and param_cache has room for the PCE file. Raises StepFailed otherwise."""
    spec, cache = ctx.settings.params, ctx.settings.daemon.param_cache
    if not spec.files and parse_size(spec.pce_bytes) == 0:
        return "no params manifest"
    facts = _probe(ctx)
    problems = _problems(ctx, facts.get("sizes") or {})
    staged_bytes = sum(_expected_size(ctx, p) for p in problems)
    _check_room(ctx, facts, staged_bytes)
    if not problems:
        return f"params in {cache}: {len(spec.files)} file(s) present"
    if spec.source is None:
        raise StepFailed(
            f"proof parameters not in {cache}: {', '.join(map(str, problems))}; "
            "copy them there or set params.source to stage them",
            retryable=False,
        )
    notes = [_stage(ctx, p.name, (facts.get("partial") or {}).get(p.name)) for p in problems]
    return f"params in {cache}: staged {'; '.join(notes)}"


def _expected_size(ctx: HostContext, problem: Problem) -> int:
    source = ctx.settings.params.source
    if problem.expected is not None:
        return problem.expected
    if source and not _URL.match(source) and (Path(source) / problem.name).is_file():
        return (Path(source) / problem.name).stat().st_size
    return 0


def _check_room(ctx: HostContext, facts: dict[str, Any], staged: int) -> None:
    spec, cache = ctx.settings.params, ctx.settings.daemon.param_cache
    pce = 0 if facts.get("pce") else parse_size(spec.pce_bytes)
    free = facts.get("free")
    if isinstance(free, int) and free < staged + pce:
        what = [f"{format_size(staged)} of params to stage"] if staged else []
        what += [f"{format_size(pce)} for the PCE file ({spec.pce_file})"] if pce else []
        raise StepFailed(
            f"param_cache {cache} has {format_size(free)} free, needs {' + '.join(what)}",
            retryable=False,
        )


def _stage(ctx: HostContext, name: str, partial_size: int | None) -> str:
    """Copy one file into param_cache through `<name>.partial` (resumed where an earlier
    try stopped), check its size and digest, then move it into place."""
    spec, cache = ctx.settings.params, ctx.settings.daemon.param_cache
    entry = next(f for f in spec.files if f.name == name)
    source = str(spec.source).rstrip("/") + "/" + name
    target, partial = f"{cache}/{name}", f"{cache}/{name}.partial"
    ctx.sh(f"mkdir -p -- {q(cache)}").check()
    want = entry.sha256
    if _URL.match(source):
        curl = f"curl -fsSL --retry 3 -o {q(partial)} -- {q(source)}"
        resume = f"curl -fsSL --retry 3 -C - -o {q(partial)} -- {q(source)}"
        code, said = run_watched(ctx, resume, partial, entry.size, "params")
        if code == 33:  # the server cannot resume (no byte ranges): from the start
            code, said = run_watched(ctx, f"rm -f -- {q(partial)} && {curl}", partial,
                                     entry.size, "params")
        if code != 0:
            raise StepFailed(f"staging {name} from {source}: curl exit {code}", output=said)
    else:
        local = Path(source)
        if not local.is_file():
            raise StepFailed(f"params.source has no file {local}", retryable=False)
        want = want or _local_sha256(local)
        put_file(ctx, str(local), partial, "params")
    _verify(ctx, partial, entry.size, want)
    ctx.sh(f"mv -T -- {q(partial)} {q(target)}").check()
    resumed = f", resumed at {partial_size} bytes" if partial_size else ""
    checked = ", sha256 verified" if want else ""
    return f"{name} ({_size_on_host(ctx, target)} bytes{resumed}{checked})"


def _verify(ctx: HostContext, path: str, size: int | None, sha256: str | None) -> None:
    found = _size_on_host(ctx, path)
    if size is not None and found != size:
        ctx.sh(f"rm -f -- {q(path)}")
        raise StepFailed(f"staged {path}: {found} bytes, expected {size}")
    if sha256 is None:
        return
    r = ctx.sh(f"sha256sum -- {q(path)}")
    have = r.stdout.split()[0] if r.ok and r.stdout else None
    if have != sha256.lower():
        ctx.sh(f"rm -f -- {q(path)}")
        raise StepFailed(f"staged {path}: sha256 {have} is not {sha256.lower()}")


def _size_on_host(ctx: HostContext, path: str) -> int | None:
    r = ctx.sh(f"stat -c %s -- {q(path)} 2>/dev/null")
    return int(r.stdout.strip()) if r.ok and r.stdout.strip().isdigit() else None


def _local_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()
