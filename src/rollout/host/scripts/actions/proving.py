"""The validation proof, and the watch on a proof whose job waits for budget."""

from __future__ import annotations

import os
import re
import signal as signals
import time
from typing import Any

# ruff: noqa: E501
# isort: off
from rollout.host.scripts.common import proof_verdict, safe_remove, safe_write  # inlined on hosts
from rollout.host.scripts.actions.base import STOPPED, _number, _report, _status_doc  # inlined on hosts
from rollout.host.scripts.actions.spec import action  # inlined on hosts
# isort: on

def executable_problem(command: str, release: str = "") -> str | None:
    """Why the command's executable is not on the host (None: it is): a bench at a path must
    be an executable file there, a bare name on PATH. validate.env's `export NAME=...; `
    words before it are skipped."""
    import shlex
    import shutil

    try:
        words = shlex.split(command)
    except ValueError:
        words = []
    while words[:1] == ["export"]:
        words = words[2:]
    exe = words[0] if words else ""
    found = (os.path.isfile(exe) and os.access(exe, os.X_OK)) if "/" in exe else bool(
        exe and shutil.which(exe))
    of = f" of release {release}" if release else ""
    return None if found else f"the validation executable{of} is not on the host: {exe!r}"


@action(
    "command:str timeout:float kill_after:float evidence:str record:str pattern:str "
    "status_url:str release:str require_executable:bool watch:obj?",
    "exit:int elapsed:float stdout:str stderr:str status_after:obj? recorded:bool passed:bool "
    "verdict:str budget_wait:obj",
    "no-command missing ran budget-wait", warms="http.client"
)
def prove(command: str, timeout: float, kill_after: float, evidence: str = "",
          record: str = "", pattern: str = "", status_url: str = "", release: str = "",
          require_executable: bool = False, watch: dict[str, Any] | None = None
          ) -> dict[str, Any]:
    """Run the validation proof (`sh -c command`) under `timeout`; the evidence of an
    earlier validation goes first, `record` is written again only when stdout passes
    proof_verdict (stderr never counts). /status is asked after a proof that was stopped.
    require_executable: never run a bench that is not on the host ("missing").
    watch ({"partition": bytes, "wait": seconds}, with status_url): /status is read every
    second while the proof runs; a proof whose job waits for budget is stopped as on
    timeout (outcome "budget-wait"; see budget_waiting)."""
    import subprocess

    if not command.strip():
        return _report("no-command", f"no validation command for release {release or '?'}")
    missing = executable_problem(command, release) if require_executable else None
    if missing:
        return _report("missing", f"{missing}; not validated")
    if evidence:
        safe_remove(evidence)  # a link there: the link itself, never its target
    started = time.monotonic()
    argv = ["timeout", "-k", f"{kill_after:g}", f"{timeout:g}", "sh", "-c", command]
    if watch and status_url:
        returncode, raw_out, raw_err, waited = _run_watched(argv, kill_after, status_url, watch)
    else:
        r = subprocess.run(argv, stdin=subprocess.DEVNULL, capture_output=True, check=False)
        returncode, raw_out, raw_err, waited = r.returncode, r.stdout, r.stderr, None
    stdout = raw_out.decode("utf-8", "replace")
    code = 128 - returncode if returncode < 0 else returncode
    passed, why = proof_verdict(stdout, pattern) if pattern else (False, "no pattern")
    out = _report("ran", f"the proof exited {code}", exit=code,
                  elapsed=round(time.monotonic() - started, 3), stdout=stdout,
                  stderr=raw_err.decode("utf-8", "replace"), status_after=None, recorded=False,
                  passed=passed, verdict=why)
    if waited is not None:
        out.update(outcome="budget-wait", budget_wait=waited, passed=False,
                   reason=f"the proof's job waited {waited['waited']:g} s for budget: stopped")
        return out
    if code in STOPPED and status_url:
        out["status_after"] = _status_doc(status_url)
    if evidence and record and passed:
        safe_write(evidence, (record + "\n").encode())  # 0600, never through a link
        out["recorded"] = True
    return out


# ---------------------------------------------------------------- a proof waiting for budget

ACTIVE = ("synthesizing", "synth_done", "gpu")  # a partition that holds its reservation
BUDGET_POLL = 1.0  # seconds between looks at /status while the proof runs
BUDGET_SETTLE = 2  # looks in a row that must show the wait before it counts


def _count(value: Any) -> int | None:
    """A whole number of bytes (or partitions) from /status: hostile data, so a bool, a
    float, a string, a negative or absurd figure is None."""
    if isinstance(value, bool) or not isinstance(value, int):
        return None
    return value if 0 <= value < (1 << 60) else None


def _job(entry: Any) -> dict[str, Any] | None:
    """One /status pipelines entry as plain, bounded data (hostile: every field's type
    checked), the one reader of cuzk's pipelines for the proof's watch and the work-aware
    stop: its id (job_id, a string or a number) and kind, its age (started_secs_ago), its
    partitions by state, and whether it has ended (cuzk keeps an ended pipeline in /status:
    every partition done, or one failed). An id of another type reads "?". None when it is
    not an object."""
    if not isinstance(entry, dict):
        return None
    parts = entry.get("partitions")
    states = [p.get("state") for p in parts[:4096] if isinstance(p, dict)] if isinstance(
        parts, list) else []
    total: Any = entry.get("total_partitions")
    done: Any = entry.get("partitions_done")
    finished = _number(total) and _number(done) and 0 < total <= done
    return {"id": _job_id(entry.get("job_id")), "kind": _job_id(entry.get("proof_kind")),
            "age": _age(entry.get("started_secs_ago")),
            "pending": sum(1 for s in states if s == "pending"),
            "active": sum(1 for s in states if s in ACTIVE),
            "done": sum(1 for s in states if s == "done"), "total": len(states),
            "ended": bool(finished) or "failed" in states}


def _jobs(doc: Any) -> list[dict[str, Any]]:
    pipelines = doc.get("pipelines") if isinstance(doc, dict) else None
    jobs = [_job(e) for e in pipelines[:256]] if isinstance(pipelines, list) else []
    return [j for j in jobs if j is not None]


def job_ids(doc: Any) -> list[str]:
    """The ids of the jobs /status lists (before the proof is submitted)."""
    return [j["id"] for j in _jobs(doc)]


def _pinned(doc: Any) -> int:
    """Bytes the SRS and PCE allocations /status lists hold (cuzk's permanent ones)."""
    alloc = doc.get("allocations") if isinstance(doc, dict) else None
    total = 0
    for key in ("srs", "pce"):
        items = alloc.get(key) if isinstance(alloc, dict) else None
        for item in items[:64] if isinstance(items, list) else []:
            total += (_count(item.get("bytes")) or 0) if isinstance(item, dict) else 0
    return total


# The id cuzk-bench `single` gives its job (uuid::Uuid::new_v4, the request_id; cuzk's engine
# gives the same form to a request that names none). Callers cannot choose it there; curio
# names its jobs porep-<miner>-<sector>, snap-..., wdpost-... (lib/ffi/cuzk_funcs.go).
BENCH_ID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}")
REGISTER_SLACK = 1.0  # seconds: a job registered since the proof began is at most that old


def own_jobs(jobs: list[dict[str, Any]], before: list[str],
             elapsed: float | None = None) -> list[dict[str, Any]]:
    """The jobs that can be the proof's, from the evidence cuzk gives (/status names no
    caller): not listed before the proof was submitted, registered since (`elapsed` s ago
    at most; None: not known), named as cuzk-bench names its job (BENCH_ID), and not ended
    (cuzk answers a job's caller as it ends). More than one only where another bench client
    submitted at the same moment; arrival order is never evidence (curio's work arrives at
    any moment)."""
    known = set(before)
    return [j for j in jobs if j["id"] not in known and BENCH_ID.fullmatch(j["id"])
            and not j["ended"]
            and (elapsed is None or j["age"] is None or j["age"] <= elapsed + REGISTER_SLACK)]


def _waits(job: dict[str, Any]) -> bool:
    return bool(job["pending"]) and not job["active"]


def budget_waiting(doc: Any, before: list[str], partition: int,
                   elapsed: float | None = None) -> dict[str, Any] | None:
    """What /status shows when the proof's job (own_jobs: where several can be it, every one
    of them) waits in cuzk's budget acquire; None when it does not, or nothing is known. It
    waits when it has a partition pending, none holding a reservation, and the budget's
    available bytes cannot hold one partition (`partition`: the kind's figure).
    `releasable`: another job holds a partition, or the budget holds more than the SRS and
    PCE allocations (a reservation that ends, such as cuzk's PCE extraction); else nothing
    will ever free room."""
    memory = doc.get("memory") if isinstance(doc, dict) else None
    memory = memory if isinstance(memory, dict) else {}
    total, used, available = (_count(memory.get(k)) for k in (
        "total_bytes", "used_bytes", "available_bytes"))
    jobs = _jobs(doc)
    mine = own_jobs(jobs, before, elapsed)
    if not mine or total is None or used is None or available is None or partition <= 0:
        return None
    if not all(_waits(j) for j in mine) or available >= partition:
        return None
    others = [j for j in jobs if j["active"]]
    pinned = _pinned(doc)
    return {"job": mine[0], "others": others, "total": total, "used": used,
            "available": available, "pinned": pinned, "partition": partition,
            "releasable": bool(others) or used > pinned}


def _run_watched(argv: list[str], kill_after: float, status_url: str,
                 watch: dict[str, Any]) -> tuple[int, bytes, bytes, dict[str, Any] | None]:
    """Run `argv` in a process group of its own, reading /status every BUDGET_POLL s. Once
    the proof's job has been seen waiting for budget BUDGET_SETTLE times, and for
    watch["wait"] s where something could release room (at once where nothing could), the
    group is stopped as timeout stops it. The wait counts from its first sight until the
    job holds or finishes a partition. Returns (exit, stdout, stderr, what /status showed
    when it was stopped, or None)."""
    import subprocess

    partition, limit = int(watch.get("partition") or 0), float(watch.get("wait") or 0)
    began = time.monotonic()
    before = job_ids(_status_doc(status_url))
    proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, start_new_session=True)
    since, looks = 0.0, 0
    while True:
        try:
            out, err = proc.communicate(timeout=BUDGET_POLL)
            return proc.returncode, out, err, None
        except subprocess.TimeoutExpired:
            pass
        doc = _status_doc(status_url)
        elapsed = time.monotonic() - began
        seen = budget_waiting(doc, before, partition, elapsed)
        if seen is None:
            mine = own_jobs(_jobs(doc), before, elapsed)
            if not mine or any(j["active"] or j["done"] for j in mine):
                looks = 0  # no job of the proof's yet, or it moves: no wait
            continue
        since, looks = (since if looks else time.monotonic()), looks + 1
        waited = time.monotonic() - since
        if looks >= BUDGET_SETTLE and waited >= (limit if seen["releasable"] else 0):
            break
    _stop_group(proc, kill_after)
    out, err = proc.communicate()
    seen.update(waited=round(waited, 1), limit=limit)
    return proc.returncode, out, err, seen


def _stop_group(proc: Any, kill_after: float) -> None:
    """Stop the proof's whole process group as timeout does: TERM, and KILL once the leader
    ended or kill_after s passed (a child left in the group goes too)."""
    import contextlib
    import subprocess

    for sig in (signals.SIGTERM, signals.SIGKILL):
        try:
            os.killpg(proc.pid, sig)
        except OSError:
            return
        if sig == signals.SIGTERM:
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=kill_after)



def _age(value: Any) -> float | None:
    ok = _number(value) and 0 <= value < 1e12  # never NaN or infinite
    return round(float(value), 3) if ok else None


def _job_id(value: Any) -> str:
    ok = isinstance(value, (str, int)) and not isinstance(value, bool)
    return str(value)[:128] if ok else "?"


@action("command:[str] circuit:str timeout:float", "exit:int load_ms:int? output:str",
        "missing loaded kept failed timeout")
def preload(command: list[str], circuit: str, timeout: float = 300.0) -> dict[str, Any]:
    """Load a circuit's SRS in the running daemon ahead of its first proof: `command` is the
    bench's argv (cuzk-bench -a ADDR preload -c CIRCUIT: cuzk's PreloadSRS). "kept": it was
    loaded already; "loaded": loaded now (load_ms); "timeout": not within `timeout` (cuzk's
    call waits for ever where the budget cannot hold the SRS); "failed": the bench's error,
    or an answer that names another circuit."""
    import re
    import subprocess

    exe = command[0] if command else ""
    if not (os.path.isfile(exe) and os.access(exe, os.X_OK)):
        return _report("missing", f"the bench is not on the host: {exe[:200]!r}")
    r = subprocess.run(["timeout", "-k", "5", f"{timeout:g}", *command],
                       stdin=subprocess.DEVNULL, capture_output=True, check=False)
    code = 128 - r.returncode if r.returncode < 0 else r.returncode
    out = r.stdout.decode("utf-8", "replace")
    output = (out + r.stderr.decode("utf-8", "replace"))[-2000:]
    if code in STOPPED:
        return _report("timeout", f"{circuit}: not loaded within {timeout:g}s", exit=code,
                       output=output)
    last = ([ln.strip() for ln in out.splitlines() if ln.strip()] or [""])[-1]
    if code == 0 and last == f"{circuit} already loaded":
        return _report("kept", f"{circuit} already loaded", exit=code, output=output)
    loaded = re.fullmatch(re.escape(circuit) + r" loaded in (\d{1,9}) ms", last)
    if code == 0 and loaded:
        return _report("loaded", last, exit=code, load_ms=int(loaded.group(1)), output=output)
    return _report("failed", f"{circuit}: the bench exited {code} without loading it",
                   exit=code, output=output)

