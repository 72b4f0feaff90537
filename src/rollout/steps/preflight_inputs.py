"""Preflight checks of what the new daemon's first proof needs besides its params: the C1's
sector and miner ids against the validation command, and room in param_cache for the PCE
file cuzk rewrites in every lifetime. Both run before anything on the host is stopped.

cuzk at curio's current commit never reads its PCE file back (PceCache::load_from_disk has
no caller): every new daemon builds the PCE again at its first proof and saves it with
cuzk-pce's save_to_disk, which writes `<pce>.tmp` (Rust's with_extension: the name's last
extension replaced) and renames it over `<pce>`. While it writes, the old file is still
there: the disk needs a second PCE's worth free. A daemon stopped while writing leaves the
`.tmp` behind; the config step removes it (after the stop, before the start).
"""

from __future__ import annotations

import functools
import json
from dataclasses import dataclass
from pathlib import Path

from rollout.config.params_manifest import ProofKind
from rollout.config.params_manifest import kind as proof_kind
from rollout.config.playbook import Playbook
from rollout.errors import StepFailed
from rollout.host.facts import HostFacts
from rollout.host.layout import Layout
from rollout.host.reports import Report
from rollout.jsontypes import JSON, JSONObject
from rollout.steps import c1
from rollout.steps.base import HostContext
from rollout.steps.decision import Release, Target
from rollout.steps.gather import Fact
from rollout.units import format_size, parse_size


class Later(Exception):
    """A check that cannot be judged from the plan's facts (a read not gathered, or work it
    must do): its step judges it when it runs."""


@dataclass(frozen=True)
class Look:
    """What a preflight check judges from: the target, the host's facts and, while the step
    runs, the host itself (None while deciding)."""

    target: Target
    facts: HostFacts
    ctx: HostContext | None = None
    read_base: bool = True  # False: no base facts were read for this look (they are empty)

    @property
    def settings(self) -> Playbook:
        return self.target.settings

    @property
    def layout(self) -> Layout:
        return self.target.layout

    @property
    def release(self) -> Release | None:
        return self.target.release

    @property
    def name(self) -> str:
        return str(self.target.host.name)

    @classmethod
    def running(cls, ctx: HostContext, facts: HostFacts | None = None) -> Look:
        """While the step runs: these facts (none: every read made now)."""
        return cls(ctx.target, facts or HostFacts(), ctx, facts is not None)

    def read(self, fact: Fact) -> JSONObject:
        """The fact's report: while deciding, as gathered (not gathered: Later); while the
        step runs, a host call (a report gathered with the plan's facts is handed to it,
        reads_ahead: no round trip), so the run makes the calls its plan lists."""
        found = self.facts.read(fact.name, fact.kwargs) if self.ctx is None else None
        if found is not None:
            return found
        return self.acting().call(fact.name, call_timeout=fact.timeout, **fact.kwargs)

    def acting(self) -> HostContext:
        """The host, for a check that acts or reads now; Later while deciding."""
        if self.ctx is None:
            raise Later()
        return self.ctx


def pce_tmp_name(pce_file: str) -> str:
    """The temporary cuzk writes the PCE through: Rust's Path::with_extension("tmp")
    (`pce-porep-32g.bin` -> `pce-porep-32g.tmp`; a name without an extension gets one)."""
    if "/" in pce_file or pce_file in ("", ".", ".."):
        raise StepFailed(f"params.pce_file {pce_file!r} is not a file name", retryable=False)
    stem, dot, ext = pce_file.rpartition(".")
    if not dot or not stem:  # no extension ("pce"), or a dot name (".pce"): appended
        return f"{pce_file}.tmp"
    return f"{stem}.tmp"


def pce_facts(target: Target) -> list[Fact]:
    """The read check_pce_space makes (ops.pce_sizes): the PCE file and its temporary in
    param_cache, and the free bytes there."""
    spec, cache = target.settings.params, target.settings.daemon.param_cache
    if parse_size(spec.pce_bytes) == 0:
        return []
    names: list[JSON] = [spec.pce_file, pce_tmp_name(spec.pce_file)]
    return [Fact("pce_sizes", {"cache": cache, "names": names}, timeout=60)]


def pce_room(pce_bytes: int, pce: JSON, tmp: JSON, free: int) -> tuple[int, int, str | None]:
    """(bytes needed, bytes there will be, why short or None). A full rewrite needs the
    larger of pce_bytes and the existing file's size; a leftover regular .tmp is removed
    before the start, so its blocks count as free. `pce` and `tmp` are the host's answers
    about the two files (hostile: a figure that is not a count of bytes counts as 0)."""
    existing, back = _figure(pce, "size"), _figure(tmp, "blocks")
    need = max(pce_bytes, existing)
    have = free + back
    if need <= have:
        return need, have, None
    because = f"the existing PCE file is {format_size(existing)}" if existing else \
        f"params.pce_bytes is {format_size(pce_bytes)}"
    return need, have, (
        f"param_cache has {format_size(have)} free"
        + (f" (with the leftover .tmp's {format_size(back)}, removed before the start)"
           if back else "")
        + f", and cuzk rewrites the PCE file through a .tmp in every lifetime, next to the "
        f"old one: it needs {format_size(need)} ({because})")


def _figure(answer: JSON, key: str) -> int:
    """answer[key] when `answer` is an object and that is a count of bytes; else 0."""
    value = answer.get(key, 0) if isinstance(answer, dict) else 0
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 0


def check_pce_space(look: Look, notes: list[str]) -> list[str]:
    """Room in param_cache for a full rewrite of the PCE file, counted again when it exists."""
    spec = look.settings.params
    pce_bytes = parse_size(spec.pce_bytes)
    if pce_bytes == 0:
        notes.append("no PCE space check (params.pce_bytes 0)")
        return []
    tmp = pce_tmp_name(spec.pce_file)
    (fact,) = pce_facts(look.target)
    out = look.read(fact)
    files, free = out.get("files") or {}, out.get("free")
    if not isinstance(free, int) or not isinstance(files, dict):
        return [f"the PCE space probe gave no figures: {str(out)[:200]}"]
    need, have, short = pce_room(pce_bytes, files.get(spec.pce_file), files.get(tmp), free)
    if short:
        return [short]
    notes.append(f"room for the PCE rewrite: {format_size(need)} of {format_size(have)} free")
    return []


# ---- the C1's ids

def c1_facts(target: Target) -> list[Fact]:
    """The read c1_ids makes where the C1 has no source on the controller (ops.c1_probe)."""
    spec = target.settings.validation.input
    return [] if spec.source else [
        Fact("c1_probe", {"path": spec.path, "limit": c1.MAX_C1_BYTES}, timeout=60)]


@functools.lru_cache(maxsize=4)
def _local_ids(path: str, size: int, mtime_ns: int) -> c1.C1Ids:
    """The ids of a C1 on the controller: read once per run (and per change of the file),
    whatever the number of hosts."""
    with open(path, "rb") as f:
        data = f.read(c1.MAX_C1_BYTES + 1)
    if len(data) > c1.MAX_C1_BYTES:
        return c1.C1Ids(None, None, f"larger than {format_size(c1.MAX_C1_BYTES)}")
    return c1.read_ids(data)


def c1_ids(look: Look) -> tuple[c1.C1Ids, str]:
    """(the ids of the C1 the host will prove with, where it was read): the controller's
    source when one is set (it is what the host gets), else the host's own file."""
    spec = look.settings.validation.input
    if spec.source:
        st = Path(spec.source).stat()
        return _local_ids(str(spec.source), st.st_size, st.st_mtime_ns), str(spec.source)
    (fact,) = c1_facts(look.target)
    out = look.read(fact)
    if "c1" not in out:
        why = out.get("missing") or out.get("odd") or "no answer"
        return c1.C1Ids(None, None, f"not readable on the host: {why}"), spec.path
    data = json.dumps(out["c1"]).encode()
    return c1.read_ids(data), f"{spec.path} on {look.name}"


def rendered_command(target: Target) -> str:
    from rollout.steps.validate import validation_command

    spec = target.settings.validation
    return validation_command(target, spec.command, target.release_id)


def check_c1_ids(look: Look, notes: list[str]) -> list[str]:
    """The C1's sector and miner are the ones the validation command asks cuzk to prove:
    else the proof fails, and only after the old daemon was stopped."""
    asked = c1.asked_ids(rendered_command(look.target))
    if asked is None:
        notes.append("the validation command is not cuzk-bench single: C1 ids not compared")
        return []
    ids, where = c1_ids(look)
    name = look.settings.validation.proof_kind
    kind = proof_kind(name) if name is not None else None
    check_miner = look.settings.preflight.c1_miner
    problem = c1.mismatch(ids, asked, kind, check_miner)
    if problem:
        return [f"validation input {where}: {problem}; the proof would fail after the stop "
                "(c1_sector_num and c1_miner_id in the default playbook)"]
    notes.append(_c1_note(ids, asked, kind, check_miner))
    return []


def _c1_note(ids: c1.C1Ids, asked: c1.Asked, kind: ProofKind | None, check_miner: bool) -> str:
    if ids.sector is None:
        return f"C1 ids not checked ({ids.why})"
    if not check_miner:
        return f"C1 is sector {ids.sector}; miner not compared ({c1.MINER_SWITCH} false)"
    matches = ids.replica_matches(asked.sector, asked.miner,
                                  None if kind is None else kind.registered_proofs)
    if matches is None:
        why = ids.why or f"registered proof {ids.proof} has no porep id in the kinds table"
        return f"C1 is sector {ids.sector}; miner not checked ({why})"
    return f"C1 made for miner {asked.miner}, sector {asked.sector}"


def leftover_pce_tmp(ctx: HostContext) -> str | None:
    """Remove `<pce>.tmp` a daemon stopped while writing left in param_cache (ops.remove_files:
    a link there is removed itself, never its target). A param_cache that is itself a link
    (params on another disk) is not removed through: the .tmp stays, said in the note, and
    the host goes on (cuzk's File::create truncates it when it writes the PCE again). Run
    after the stop, before the start. A note, or None."""
    spec, cache = ctx.settings.params, ctx.settings.daemon.param_cache
    path = f"{cache.rstrip('/')}/{pce_tmp_name(spec.pce_file)}"
    report = Report.parse(ctx.call("remove_files", call_timeout=60, paths=[path]))
    if report.outcome == "failed":  # left as it is: cuzk truncates it when it writes it again
        return f"left {path} in place: {report.reason[:400]}"
    return f"removed a leftover {path}" if report.outcome == "removed" else None
