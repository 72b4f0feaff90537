"""Opt-in: proof parameters pushed from a folder on the controller (params.source) into
`<param_cache>/<name>.partial` on a host that lacks them, resumed where an earlier try
stopped; the host then checks and moves them into place (host/scripts/fetch.py, URL "-").

Each source file is hashed once per run, whatever the number of hosts: a file that is not
the manifest's is refused before a byte goes out."""

from __future__ import annotations

import hashlib
import threading
from pathlib import Path

from rollout.config.sections import ParamFile
from rollout.errors import StepFailed
from rollout.host.reports import Report
from rollout.steps.base import HostContext
from rollout.steps.transfer import put_file

CHUNK = 1 << 20
_hashed: dict[tuple[str, str, int, int], str] = {}
_hashing = threading.Lock()  # hosts in one batch wait for the one hashing a file


def digest_arg(f: ParamFile) -> str:
    """fetch.py's DIGEST for this file: blake2b (filecoin-proofs'), else sha256, else -."""
    if f.digest:
        return f"blake2b:{f.digest}"
    return f"sha256:{f.sha256.lower()}" if f.sha256 else "-"


def local_digest(path: Path, algo: str) -> str:
    """The file's digest as fetch.py writes `algo`'s, computed once per run (per path, size
    and modification time)."""
    st = path.stat()
    key = (str(path), algo, st.st_size, st.st_mtime_ns)
    with _hashing:
        if key not in _hashed:
            h = hashlib.blake2b() if algo == "blake2b" else hashlib.sha256()
            with path.open("rb") as f:
                for block in iter(lambda: f.read(CHUNK), b""):
                    h.update(block)
            _hashed[key] = h.hexdigest()[:32] if algo == "blake2b" else h.hexdigest()
        return _hashed[key]


def _checked_source(ctx: HostContext, f: ParamFile) -> Path:
    local = Path(str(ctx.settings.params.source)) / f.name
    if not local.is_file():
        raise StepFailed(f"params.source has no file {local}", retryable=False)
    if f.size is not None and local.stat().st_size != f.size:
        raise StepFailed(f"params.source {local}: {local.stat().st_size} bytes, expected "
                         f"{f.size}; refused, not pushed", retryable=False)
    algo, _, want = digest_arg(f).partition(":")
    if want and local_digest(local, algo) != want:
        raise StepFailed(f"params.source {local}: {algo} {local_digest(local, algo)}, "
                         f"expected {want}; refused, not pushed", retryable=False)
    return local


def push_missing(ctx: HostContext, missing: list[ParamFile]) -> dict[str, str]:
    """Push each missing file to `<param_cache>/<name>.partial`; {name: the DIGEST the host
    checks it by}: the manifest's, else the source file's own sha256 (hashed once a run)."""
    cache = ctx.settings.daemon.param_cache
    made = Report.parse(ctx.call("make_folder", path=cache, link_ok=True))
    if made.outcome not in ("made", "kept"):
        raise StepFailed(f"params not pushed: {made.reason}", retryable=False)
    pushed = {}
    for f in missing:
        local = _checked_source(ctx, f)
        put_file(ctx, str(local), f"{cache}/{f.name}.partial", "params")
        digest = digest_arg(f)
        pushed[f.name] = digest if digest != "-" else f"sha256:{local_digest(local, 'sha256')}"
    return pushed
