"""Work in flight and the cordon."""

from __future__ import annotations

import json
import os
import re
import time
from typing import Any

# ruff: noqa: E501
# isort: off
from rollout.host.scripts.common import cuzk_processes, format_size, safe_mkdir, safe_remove, safe_write  # inlined on hosts
from rollout.host.scripts.actions.base import STOPPED, _number, _read_at_most, _report, _state_dir, _status_answer  # inlined on hosts
from rollout.host.scripts.actions.spec import action  # inlined on hosts
from rollout.host.scripts.actions.proving import _age, _count, _job_id, _jobs, _pinned  # inlined on hosts
# isort: on

# ---------------------------------------------------------------- work in flight and the cordon
# (issue 17: a busy prover; issue 27: every kind). The controller polls `work` before the
# stop; `cordon` and `uncordon` run the user's own commands (curio cordon / curio uncordon)
# through `user_command`, and keep "cordoned by run X" in <root>/rollout/cordoned.json.
#
# cuzk shows a job in flight in three places, none of them whole (cuzk-core/src/engine.rs,
# status.rs, cuzk-server/src/service.rs): /status `pipelines`, `gpu_workers[].current_job` and
# `counters.queue_depth` list partitioned PoRep and SnapDeals jobs only, and only once the SRS
# is loaded; GetStatus (`cuzk-bench status`) names each worker's job while it is on the GPU,
# PoSt included, and counts the queue per kind; every proof reserves its working memory in
# the budget before synthesis, so `memory.used_bytes` above the SRS and PCE `allocations` is
# work in flight of any kind (a proof's synthesis, an SRS load, a PCE extraction).

STAGES = {"pending": 0, "synthesizing": 1, "synth_done": 2, "gpu": 3, "done": 4, "failed": 4}
"""A partition's stages in cuzk's order (status.rs PartitionPhase): a job's `steps`, the sum
over its partitions, grows at every move and at nothing else. A partition's gpu_ms is no
progress: cuzk computes it from the clock while the partition is in `gpu`, stuck or not."""
BENCH_TIMEOUT = 10.0  # seconds for `cuzk-bench status` (it has no timeout of its own)
BENCH_HEAD = "=== cuzk daemon status ==="
GPU_LINE = re.compile(r"^\s*\[\d{1,4}\] .* \u2014 (?:idle|proving (\S{1,40}) \((\S{0,128})\))\s*$")
QUEUE_LINE = re.compile(r"^\s*(\S{1,40}): pending=(\d{1,9}), in_progress=(\d{1,9})\s*$")
MOST_JOBS = 50


def _steps(entry: Any) -> int | None:
    """A pipeline's progress: the sum of its partitions' stages (STAGES); None unread."""
    parts = entry.get("partitions") if isinstance(entry, dict) else None
    if not isinstance(parts, list):
        return None
    states = [p.get("state") for p in parts[:4096] if isinstance(p, dict)]
    return sum(STAGES.get(s, 0) if isinstance(s, str) else 0 for s in states)


def jobs_in_flight(doc: Any) -> dict[str, Any]:
    """The work cuzk's /status shows (hostile data, read with its types checked): each job
    in flight, {"kind", "id", "age" (seconds), "steps" (its progress, _steps), "seen"}, from
    `pipelines` (a pipeline whose partitions are not all done and none failed) and
    `gpu_workers[].current_job`; the queue's depth (counters.queue_depth). "idle": no job
    and an empty queue; "busy"; "unknown": not cuzk's shape."""
    if not isinstance(doc, dict):
        return _report("unknown", "/status is not a JSON object", jobs=[], queue_depth=None)
    pipelines, workers = doc.get("pipelines"), doc.get("gpu_workers")
    counters: Any = doc.get("counters")
    depth: Any = counters.get("queue_depth") if isinstance(counters, dict) else None
    queue = int(depth) if _number(depth) and depth >= 0 else None
    if not isinstance(pipelines, list) and not isinstance(workers, list) and queue is None:
        return _report("unknown", "/status shows no pipelines, gpu_workers or queue_depth",
                       jobs=[], queue_depth=None)
    steps = {_job_id(e.get("job_id")): _steps(e)
             for e in (pipelines[:256] if isinstance(pipelines, list) else [])
             if isinstance(e, dict)}
    jobs = {j["id"]: {"id": j["id"], "kind": j["kind"], "age": j["age"],
                      "steps": steps.get(j["id"]), "seen": "status"}
            for j in _jobs(doc) if not j["ended"]}
    for w in workers if isinstance(workers, list) else []:
        current = w.get("current_job") if isinstance(w, dict) else None
        if current is not None and _job_id(current) not in jobs:
            job = _job_id(current)
            jobs[job] = {"id": job, "kind": "?", "age": _age(w.get("busy_secs")),
                         "steps": None, "seen": "status"}
    found = sorted(jobs.values(), key=lambda j: j["id"])[:MOST_JOBS]
    if not found and not queue:
        return _report("idle", "no job in flight, queue empty", jobs=[], queue_depth=queue)
    return _report("busy", f"{len(jobs)} job(s) in flight, {queue or 0} queued", jobs=found,
                   queue_depth=queue)


def bench_status(text: str) -> dict[str, Any] | None:
    """GetStatus as `cuzk-bench status` prints it (cuzk-bench/src/main.rs; hostile text):
    each job on a GPU ({"kind", "id": the first 8 characters cuzk-bench prints}), a job
    `in_progress` in a queue line that no GPU line names (id "?"), and the jobs queued
    (`pending`, summed). None: not its answer."""
    lines = text.splitlines()[:4096]
    if not any(ln.strip() == BENCH_HEAD for ln in lines):
        return None
    jobs: list[dict[str, Any]] = []
    pending, running = 0, {}
    for ln in lines:
        gpu, queue = GPU_LINE.match(ln), QUEUE_LINE.match(ln)
        if gpu and gpu.group(1):
            jobs.append({"kind": gpu.group(1), "id": gpu.group(2) or "?"})
        if queue:
            pending += int(queue.group(2))
            running[queue.group(1)] = int(queue.group(3))
    for kind, count in running.items():
        named = sum(1 for j in jobs if j["kind"] == kind)
        jobs += [{"kind": kind, "id": "?"}] * max(0, min(count, MOST_JOBS) - named)
    return {"jobs": [{**j, "age": None, "steps": None, "seen": "grpc"} for j in jobs[:MOST_JOBS]],
            "pending": pending}


def _bench_look(bench: list[str]) -> dict[str, Any] | None:
    """Run `bench` (the release's `cuzk-bench -a ADDR status`, or the operator's client) under
    BENCH_TIMEOUT; what bench_status reads in its output, None where it did not answer."""
    import shutil
    import subprocess

    exe = bench[0] if bench else ""
    found = (os.path.isfile(exe) and os.access(exe, os.X_OK)) if "/" in exe else bool(
        exe and shutil.which(exe))
    if not found:
        return None
    r = subprocess.run(["timeout", "-k", "2", f"{BENCH_TIMEOUT:g}", *bench],
                       stdin=subprocess.DEVNULL, capture_output=True, check=False)
    return bench_status(r.stdout[-65536:].decode("utf-8", "replace")) if r.returncode == 0 \
        else None


def working_bytes(doc: Any) -> int | None:
    """Bytes of cuzk's budget in use above its SRS and PCE allocations (/status `memory`,
    `allocations`): the working memory of work in flight; None where /status shows none."""
    memory = doc.get("memory") if isinstance(doc, dict) else None
    used = _count(memory.get("used_bytes")) if isinstance(memory, dict) else None
    return None if used is None else max(0, used - _pinned(doc))


GRPC_ID = 8
"""cuzk-bench prints a GPU's job by the first 8 characters of its id (cuzk-bench/src/main.rs:
`current_job_id[..8]`)."""


def same_job(a: str, b: str, a_seen: Any = None, b_seen: Any = None) -> bool:
    """Whether two names are of one job (the one rule, on the host and in the controller's
    wait): the same id, or one is the id as cuzk-bench prints it (seen "grpc": the first
    GRPC_ID characters of an id) and the other begins with it. "?" (a job no line names)
    is never the same as another."""
    if a == b:
        return a != "?"
    return any(seen == "grpc" and len(short) == GRPC_ID and full.startswith(short)
               for short, seen, full in ((a, a_seen, b), (b, b_seen, a)))


def _same(job: dict[str, Any], named: list[dict[str, Any]]) -> bool:
    """A GetStatus job that /status names too (its kind, and its id by same_job)."""
    return any(j["kind"] == job["kind"] and same_job(job["id"], j["id"], "grpc", j.get("seen"))
               for j in named)


def looked(doc: Any, grpc: dict[str, Any] | None, daemon_running: bool) -> dict[str, Any]:
    """The work report from every signal: /status (`doc`, None: it did not answer), GetStatus
    (`grpc`, bench_status's reading, None: it did not answer) and the working memory in
    /status. "idle": every signal that answered says idle, and one did; "busy": one shows
    work; "no-answer": none answered and no daemon runs; else "unknown" (a daemon runs and
    none answered, or a /status not of cuzk's shape)."""
    status = jobs_in_flight(doc) if doc is not None else None
    working = working_bytes(doc) if status is not None and status["outcome"] != "unknown" \
        else None
    signals = {
        "status": status["outcome"] if status else "none",
        "grpc": "none" if grpc is None else "busy" if grpc["jobs"] or grpc["pending"] else "idle",
        "memory": "none" if working is None else "busy" if working else "idle"}
    jobs = list(status["jobs"]) if status else []
    jobs += [j for j in (grpc or {}).get("jobs", []) if not _same(j, jobs)]
    depths = [d for d in ((status or {}).get("queue_depth"), (grpc or {}).get("pending"))
              if d is not None]
    data = {"jobs": jobs[:MOST_JOBS], "queue_depth": max(depths) if depths else None,
            "working_bytes": working, "signals": signals}
    said = ", ".join(f"{k} {v}" for k, v in signals.items())
    words = set(signals.values())
    if words == {"none"}:
        return _report("unknown" if daemon_running else "no-answer",
                       "the daemon runs but answers no signal" if daemon_running
                       else "no daemon runs and nothing answered", **data)
    if "busy" in words:
        memory = f", {format_size(working)} of working memory" if working else ""
        return _report("busy", f"{len(jobs)} job(s) in flight, {data['queue_depth'] or 0} "
                       f"queued{memory} ({said})", **data)
    if "unknown" in words:
        return _report("unknown", f"{(status or {}).get('reason', '')} ({said})", **data)
    return _report("idle", f"no job in flight, queue empty ({said})", **data)


@action("status_url:str bench:[str]? proc:str",
        "jobs:[obj] queue_depth:int? working_bytes:int? signals:{str}",
        "no-answer unknown idle busy", warms="http.client")
def work(status_url: str, bench: list[str] | None = None, proc: str = "/proc"
         ) -> dict[str, Any]:
    """What the daemon is working on now, from every signal it gives, in one call (looked):
    its /status (`status_url`; "" where the port is off), GetStatus through `bench` (the
    release's `cuzk-bench -a ADDR status` argv, or the operator's client; None: not asked)
    and the working memory /status shows. "no-answer" only where no daemon process runs.
    /status is read last: GetStatus may take seconds (cuzk runs nvidia-smi for each), and
    the stop's look is right before its signal."""
    grpc = _bench_look(bench) if bench else None
    answer = _status_answer(status_url) if status_url else None
    try:
        doc = json.loads(answer) if answer is not None else None
    except ValueError:
        doc = "not JSON"  # it answered, not with cuzk's shape: "unknown"
    running = doc is None and grpc is None and any(
        p["state"] == "running" for p in cuzk_processes(proc, None))
    return looked(doc, grpc, running)


def without_stuck(outcome: Any, others: int, queue: Any, working: Any,
                  signals: Any) -> Any:
    """A look's outcome once the stuck jobs are out of it (the one rule of the stop's last
    look, arrived, and of the controller's wait, reports.WorkReport.without): a busy look
    stays busy where another job (`others`), a queue or working memory shows work (cuzk
    frees a failed partition's reservation, engine.rs: working memory is never the stuck
    job's); else "unknown" where a signal (`signals`: their words) did not read, else
    "idle"."""
    if outcome != "busy" or others or queue or working:
        return outcome
    return "unknown" if "unknown" in signals else "idle"


def arrived(look: dict[str, Any], known: list[str]) -> str:
    """Why a stop after its wait must not signal (issue 27: work that arrives after the
    wait's last look, in the stop call's own round trip): `look` (work's report, taken right
    before the signal) shows work other than the jobs `known` (stuck: the wait let them go)
    by the rule the wait itself follows (without_stuck), or cannot tell. "" where the stop
    may signal."""
    new = [j for j in look.get("jobs", []) if not any(
        same_job(str(j.get("id")), k, j.get("seen")) for k in known)]
    outcome = without_stuck(look.get("outcome"), len(new), look.get("queue_depth"),
                            look.get("working_bytes"), (look.get("signals") or {}).values())
    if outcome in ("idle", "no-answer"):
        return ""
    what = "work arrived" if outcome == "busy" else "the work is unknown"
    return f"{what} since the wait's last look ({look.get('reason', '')})"


@action("command:str timeout:float", "exit:int output:str", "no-command timeout ran failed")
def user_command(command: str, timeout: float = 60.0) -> dict[str, Any]:
    """Run one of the user's own commands (cordon, uncordon: rendered and quoted on the
    controller as the validation command is) as `sh -c command` under `timeout`."""
    import subprocess

    if not command.strip():
        return _report("no-command", "no command to run")
    r = subprocess.run(["timeout", "-k", "5", f"{timeout:g}", "sh", "-c", command],
                       stdin=subprocess.DEVNULL, capture_output=True, check=False)
    code = 128 - r.returncode if r.returncode < 0 else r.returncode
    output = (r.stdout + r.stderr).decode("utf-8", "replace")[-2000:]
    if code in STOPPED:
        return _report("timeout", f"did not end within {timeout:g}s", exit=code, output=output)
    return _report("ran" if code == 0 else "failed", f"exited {code}", exit=code, output=output)


def _cordon_record(root: str) -> str:
    return os.path.join(_state_dir(root), "cordoned.json")


@action("root:str", "run:str? time:float?", "none cordoned", in_agent=True)
def cordoned(root: str) -> dict[str, Any]:
    """The record "cordoned by run X" (hostile data: what a host file says), if any."""
    try:
        doc = json.loads(_read_at_most(_cordon_record(root), 4096) or b"null")
    except ValueError:  # in the agent: a regular file, never a link, read bounded
        doc = {"run": "?"}
    if not isinstance(doc, dict):
        return _report("none", "not cordoned by rollout", run=None)
    run = _job_id(doc.get("run"))
    return _report("cordoned", f"cordoned by run {run}", run=run, time=_age(doc.get("time")))


@action(
    "root:str run_id:str command:str timeout:float status_url:str bench:[str]? proc:str",
    "exit:int output:str work:obj",
    "cordoned no-command timeout failed", warms="http.client"
)
def cordon(root: str, run_id: str, command: str, timeout: float = 60.0,
           status_url: str = "", bench: list[str] | None = None, proc: str = "/proc"
           ) -> dict[str, Any]:
    """Record "cordoned by run RUN_ID" first (a host is never cordoned without the record
    that gets it uncordoned), then run the cordon command; once it ran, the wait's first
    look at the work in flight (`work`, ops.work's report) where `status_url` or `bench` is
    given."""
    safe_mkdir(_state_dir(root))
    safe_write(_cordon_record(root), json.dumps({"run": run_id[:128], "time": time.time()},
                                                sort_keys=True).encode(), 0o644)
    out = user_command(command, timeout)
    word = "cordoned" if out["outcome"] == "ran" else out["outcome"]
    looks = word == "cordoned" and (status_url or bench)
    looked_now = {"work": work(status_url, bench, proc)} if looks else {}
    return {**out, "outcome": word, "reason": f"cordon command {out['reason']}", **looked_now}


@action(
    "root:str command:str timeout:float",
    "exit:int output:str record_removed:bool",
    "none no-command timeout failed uncordoned"
)
def uncordon(root: str, command: str, timeout: float = 60.0) -> dict[str, Any]:
    """Run the uncordon command where rollout's record says it cordoned the host ("none":
    no record, nothing run); once it succeeded, remove the record."""
    if not os.path.lexists(_cordon_record(root)):
        return _report("none", "not cordoned by rollout: nothing to undo")
    out = user_command(command, timeout)
    if out["outcome"] != "ran":
        return {**out, "reason": f"uncordon command {out['reason']}: the record is kept"}
    removed = safe_remove(_cordon_record(root))
    return {**out, "outcome": "uncordoned", "reason": f"uncordon command {out['reason']}",
            "record_removed": removed}
