"""Work in flight and the cordon."""

from __future__ import annotations

import json
import os
import time
from typing import Any

# ruff: noqa: E501
# isort: off
from rollout.host.scripts.common import read_text, safe_mkdir, safe_remove, safe_write  # inlined on hosts
from rollout.host.scripts.actions.base import STOPPED, _number, _report, _state_dir, _status_answer  # inlined on hosts
from rollout.host.scripts.actions.spec import action  # inlined on hosts
from rollout.host.scripts.actions.proving import _age, _job_id, _jobs  # inlined on hosts
# isort: on

# ---------------------------------------------------------------- work in flight and the cordon
# (issue 17: a busy prover). The controller polls `work` before the stop; `cordon` and
# `uncordon` run the user's own commands (curio cordon / curio uncordon) through
# `user_command`, and keep "cordoned by run X" in <root>/rollout/cordoned.json.



def jobs_in_flight(doc: Any) -> dict[str, Any]:
    """The work cuzk's /status shows (hostile data, read with its types checked): each job
    in flight, {"kind", "id", "age"} (seconds), from `pipelines` (a pipeline whose
    partitions are not all done and none failed) and `gpu_workers[].current_job`; the
    queue's depth (counters.queue_depth). "idle": no job and an empty queue; "busy";
    "unknown": not cuzk's shape."""
    if not isinstance(doc, dict):
        return _report("unknown", "/status is not a JSON object", jobs=[], queue_depth=None)
    pipelines, workers = doc.get("pipelines"), doc.get("gpu_workers")
    counters: Any = doc.get("counters")
    depth: Any = counters.get("queue_depth") if isinstance(counters, dict) else None
    queue = int(depth) if _number(depth) and depth >= 0 else None
    if not isinstance(pipelines, list) and not isinstance(workers, list) and queue is None:
        return _report("unknown", "/status shows no pipelines, gpu_workers or queue_depth",
                       jobs=[], queue_depth=None)
    jobs = {j["id"]: {k: j[k] for k in ("id", "kind", "age")}
            for j in _jobs(doc) if not j["ended"]}
    for w in workers if isinstance(workers, list) else []:
        current = w.get("current_job") if isinstance(w, dict) else None
        if current is not None and _job_id(current) not in jobs:
            job = _job_id(current)
            jobs[job] = {"id": job, "kind": "?", "age": _age(w.get("busy_secs"))}
    found = sorted(jobs.values(), key=lambda j: j["id"])[:50]
    if not found and not queue:
        return _report("idle", "no job in flight, queue empty", jobs=[], queue_depth=queue)
    return _report("busy", f"{len(jobs)} job(s) in flight, {queue or 0} queued", jobs=found,
                   queue_depth=queue)


@action("status_url:str", "jobs:[obj] queue_depth:int?", "no-answer unknown idle busy")
def work(status_url: str) -> dict[str, Any]:
    """What the daemon is working on now, from its /status (jobs_in_flight); "no-answer"
    when the status port does not answer (no daemon: nothing can be in flight)."""
    answer = _status_answer(status_url) if status_url else None
    if answer is None:
        return _report("no-answer", f"{status_url or 'no status port'} did not answer",
                       jobs=[], queue_depth=None)
    try:
        doc = json.loads(answer)
    except ValueError:
        doc = None
    return jobs_in_flight(doc)


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


@action("root:str", "run:str? time:float?", "none cordoned")
def cordoned(root: str) -> dict[str, Any]:
    """The record "cordoned by run X" (hostile data: what a host file says), if any."""
    try:
        doc = json.loads(read_text(_cordon_record(root)) or "null")
    except ValueError:
        doc = {"run": "?"}
    if not isinstance(doc, dict):
        return _report("none", "not cordoned by rollout", run=None)
    run = _job_id(doc.get("run"))
    return _report("cordoned", f"cordoned by run {run}", run=run, time=_age(doc.get("time")))


@action(
    "root:str run_id:str command:str timeout:float status_url:str",
    "exit:int output:str work:obj",
    "cordoned no-command timeout failed"
)
def cordon(root: str, run_id: str, command: str, timeout: float = 60.0,
           status_url: str = "") -> dict[str, Any]:
    """Record "cordoned by run RUN_ID" first (a host is never cordoned without the record
    that gets it uncordoned), then run the cordon command; once it ran, the wait's first
    look at the work in flight (`work`, ops.work's report) when `status_url` is given."""
    safe_mkdir(_state_dir(root))
    safe_write(_cordon_record(root), json.dumps({"run": run_id[:128], "time": time.time()},
                                                sort_keys=True).encode(), 0o644)
    out = user_command(command, timeout)
    word = "cordoned" if out["outcome"] == "ran" else out["outcome"]
    looked = {"work": work(status_url)} if word == "cordoned" and status_url else {}
    return {**out, "outcome": word, "reason": f"cordon command {out['reason']}", **looked}


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
