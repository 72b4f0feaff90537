"""The one reading of a rollback kind's host calls: their reports (rollout.host.scripts.ops)
turned into the step's (status, reason, data), status one of changed, ok, skipped, failed.

The controller's steps (stop, drain, switch, start, ready, validate) and the host's guard
both read results here, in the same words. Reports are hostile data: a missing key or a
wrong type is never a crash, only a failed (or skipped) verdict.
Standard library only; python3 >= 3.9 (inlined into the guard's script on hosts).
"""

from __future__ import annotations

import json
from typing import Any

# ruff: noqa: E501
# isort: off
from rollout.host.scripts.common import drain_failure, format_size, proof_verdict  # inlined on hosts
# isort: on

Verdict = tuple[str, str, dict[str, Any]]
TIMED_OUT, KILLED = 124, 137  # timeout's status when it stopped the proof (TERM, KILL)


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _num(value: Any) -> float | None:
    ok = isinstance(value, (int, float)) and not isinstance(value, bool)
    return float(value) if ok else None


def _text(value: Any, limit: int = 300) -> str:
    return value[:limit] if isinstance(value, str) else ""


def _dict(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _data(report: dict[str, Any]) -> dict[str, Any]:
    """A report as a step's data (its reason is the step's own)."""
    return {k: v for k, v in report.items() if k != "reason"}


def stopped_daemon(report: Any) -> tuple[int, int | None]:
    """The daemon a stop's report says it stopped or found dead, which the drain of the same
    plan waits for: (pid, start time); (0, None) where it stopped none (the drain then waits
    for the memory alone)."""
    doc = _dict(report)
    pid = _int(doc.get("pid"))
    if doc.get("outcome") not in ("stopped", "already-dead") or pid is None or pid <= 0:
        return 0, None
    return pid, _int(doc.get("starttime"))


def drain_kwargs(kwargs: dict[str, Any], stop_report: Any) -> dict[str, Any]:
    """The drain call's arguments with the daemon the stop of the same plan stopped."""
    pid, starttime = stopped_daemon(stop_report)
    return {**kwargs, "pid": pid, "starttime": starttime}


def verdict(kind: str, calls: list[Any], reports: list[Any]) -> Verdict:
    """(status, reason, data) of one step of `kind` from its calls ({"call", "kwargs"}) and
    their reports, in order."""
    judge = JUDGES.get(kind)
    docs = [_dict(r) for r in reports]
    if judge is None or not docs:
        return "failed", f"no report for step {kind!r}", {}
    args = [_dict(_dict(c).get("kwargs")) for c in calls] + [{}] * len(docs)
    return judge(args[:len(docs)], docs)


def stop(args: list[dict[str, Any]], docs: list[dict[str, Any]]) -> Verdict:
    if any(a.get("adopt_pid") for a in args):
        return _adopted(args, docs)
    out, sent = docs[0], _text(args[0].get("signal"), 20) or "its signal"
    outcome, pid = out.get("outcome"), out.get("pid")
    if outcome == "kept":
        return "skipped", _text(out.get("reason")) or "daemon kept", _data(out)
    if outcome == "none":
        return "skipped", "hold set; no daemon pidfile, nothing to stop", _data(out)
    if outcome == "untrusted":
        return "skipped", f"hold set; {_text(out.get('reason'))}", _data(out)
    if outcome == "already-dead":
        return "skipped", f"hold set; daemon {pid} already {_text(out.get('state'), 40)}", _data(out)
    if outcome == "busy":
        look = _dict(out.get("work"))
        return "failed", (f"work arrived before the signal, nothing stopped: "
                          f"{jobs_said(look.get('jobs'), look.get('queue_depth'))}"), _data(out)
    if outcome != "stopped":
        return "failed", f"daemon {pid} survived {sent} and SIGKILL", _data(out)
    how = _text(out.get("signal"), 20) or sent
    how += ", escalated to SIGKILL" if out.get("escalated") is True else ""
    said, abandoned = abandoned_said(out) if args[0].get("on_work") == "abandon" else ("", {})
    return "changed", f"hold set; daemon {pid} stopped ({how}){said}", {**_data(out), **abandoned}


def job_said(job: Any) -> str:
    """One job for people (an entry of ops.work's report, hostile): kind, id and age."""
    doc = _dict(job)
    age = _num(doc.get("age"))
    return (f"{_text(doc.get('kind'), 40) or '?'} {_text(doc.get('id'), 80) or '?'} "
            f"({'age unknown' if age is None or age < 0 else f'{age:.0f}s'})")


def jobs_said(jobs: Any, queue: Any) -> str:
    """The jobs of a look at the work and its queue, for people (at most 10 named)."""
    listed = [j for j in jobs if isinstance(j, dict)] if isinstance(jobs, list) else []
    named = ", ".join(job_said(j) for j in listed[:10]) or "no job"
    more = f" and {len(listed) - 10} more" if len(listed) > 10 else ""
    depth = _int(queue)
    return f"{named}{more}; queue {'unknown' if depth is None else depth}"


NO_CORDON_HELD = ("; no cordon held the host (work.cordon): curio may have sent this "
                  "daemon real work")


def abandoned_said(out: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    """What a stop at once (a rollback's, `--force`) abandoned (issue 27): its one look at
    the work right before the signal (the stop report's `work`, `cordoned`), said and as
    data. A busy or unknown look is information, never a failure: it is stopped."""
    look = _dict(out.get("work"))
    jobs = [j for j in look.get("jobs", []) if isinstance(j, dict)] \
        if isinstance(look.get("jobs"), list) else []
    data = [{"kind": _text(j.get("kind"), 40), "id": _text(j.get("id"), 80),
             "age": _num(j.get("age"))} for j in jobs[:50]]
    cordon = "" if out.get("cordoned") is True else NO_CORDON_HELD
    if look.get("outcome") == "busy":
        said = (f"; stopped at once, abandoning {len(jobs)} job(s) in flight: "
                f"{jobs_said(jobs, look.get('queue_depth'))}{cordon}")
    elif look.get("outcome") == "unknown":
        said = f"; stopped at once, its work unknown ({_text(look.get('reason'))}){cordon}"
    else:
        said = ""
    return said, {"abandoned": data}


def _adopted(args: list[dict[str, Any]], docs: list[dict[str, Any]]) -> Verdict:
    """Daemons rollout's supervisor did not start, each stopped by a call of its own; a
    stop at once names what it abandons (the first call's look, abandoned_said)."""
    for i, out in enumerate(docs):
        a, pid = args[i], args[i].get("adopt_pid")
        if out.get("outcome") == "respawned":
            return "failed", (
                f"adopted daemon {pid} was respawned by its parent pid {out.get('parent')} "
                f"({_text(out.get('parent_cmdline')) or '?'}): new daemon(s) "
                f"{out.get('respawned') if isinstance(out.get('respawned'), list) else []}; "
                "the host keeps serving from them. Hand the loop's cuzk over to rollout's "
                "supervisor first (docs/adopt.md)"), {"adopted": out}
        if out.get("outcome") not in ("stopped", "already-dead"):
            return "failed", (f"adopted daemon {pid} survived {_text(a.get('signal'), 20)} "
                              "and SIGKILL"), {"adopted": out}
    names = ", ".join(f"{o.get('pid')} ({_text(o.get('cmdline')) or '?'})" for o in docs)
    said, abandoned = abandoned_said(docs[0]) if args[0].get("on_work") == "abandon" \
        else ("", {})
    return "changed", f"hold set; adopted and stopped daemon(s) {names}{said}", {
        "adopted": docs, **abandoned}


def drain(args: list[dict[str, Any]], docs: list[dict[str, Any]]) -> Verdict:
    out = docs[-1]
    outcome = out.get("outcome")
    if outcome == "kept":
        return "skipped", _text(out.get("reason")) or "nothing was stopped", _data(out)
    if outcome != "drained":
        return "failed", drain_failure(out), _data(out)
    note = f"; {_text(out.get('zombie_note'))}" if out.get("zombie_note") else ""
    waited = (_num(out.get("ended")) or 0.0) - (_num(out.get("started")) or 0.0)
    drained_by = {
        "budget": f"headroom fits the budget {format_size(out.get('budget'))}",
        "baseline": "working set back to its level before the old daemon started",
    }.get(_text(out.get("drained_by"), 20), "memory not measurable here")
    who = "old daemon gone and" if _int(out.get("pid")) else "no daemon stopped here;"
    return "ok", (f"{who} {drained_by} after {waited:.1f}s (working set "
                  f"{format_size(out.get('working_set'))}, page cache "
                  f"{format_size(out.get('page_cache'))}){note}"), _data(out)


def switch(args: list[dict[str, Any]], docs: list[dict[str, Any]]) -> Verdict:
    """current pointed at the release (ops.point_current), then, where asked, the config it
    ran with put back (ops.restore_config)."""
    pointed, release = docs[0], _text(args[0].get("release"), 128)
    if pointed.get("outcome") not in ("pointed", "kept"):
        return "failed", f"could not point current at {release}: {_text(pointed.get('reason'))}", {}
    before = pointed.get("previous")
    data = {"previous": before if isinstance(before, str) else None, "release": release}
    changed = pointed.get("outcome") == "pointed"
    reason = (f"current: {data['previous'] or 'none'} -> {release}" if changed
              else f"current already points at {release}")
    for out in docs[1:]:
        if out.get("outcome") == "restored":
            changed, reason = True, f"{reason}; restored the config {release} ran with"
        elif out.get("outcome") not in ("kept", "none"):
            return "failed", f"config of {release} not restored: {_text(out.get('reason'))}", data
    return ("changed" if changed else "skipped"), reason, data


def start(args: list[dict[str, Any]], docs: list[dict[str, Any]]) -> Verdict:
    out, wait = docs[0], _num(args[0].get("wait")) or 0.0
    outcome, line = out.get("outcome"), _text(out.get("pidline"), 4096)
    if outcome == "no-release":
        return "failed", f"{args[0].get('root')}/current does not point at a release", _data(out)
    if outcome == "refused":
        return "failed", f"could not start the supervisor: {_text(out.get('reason'))}", _data(out)
    if outcome not in ("started", "running"):
        return "failed", f"supervisor did not start the daemon within {wait:.0f}s", _data(out)
    if not line.split():
        return "failed", "the supervisor's daemon.pid named the release but came back empty", {}
    return "changed", f"hold released; supervisor started daemon {line.split()[0]}", {
        "pidfile": line}


def ready(args: list[dict[str, Any]], docs: list[dict[str, Any]]) -> Verdict:
    """The gRPC port accepts and the status port answers with a JSON object (never a log
    line); its answer summed up."""
    out, url = docs[0], _text(args[0].get("status_url")) or "the daemon"
    seconds = _num(args[0].get("seconds")) or 0.0
    if out.get("outcome") == "died":
        return "failed", f"{_text(out.get('reason'))}; status port {url} never answered", {}
    if out.get("outcome") != "ready":
        why = _text(out.get("reason")) if out.get("outcome") == "stranger" else \
            f"status port {url} did not answer within {seconds:.0f}s"
        return "failed", why, {}
    answer = _text(out.get("answer"), 1 << 20)
    if not args[0].get("status_url"):
        return "ok", f"{_text(out.get('reason')) or 'the daemon answered'} (no status port)", {}
    try:
        status = json.loads(answer)
    except ValueError:
        return "failed", f"{url} answered with something that is not JSON: {answer[:200]}", {}
    if not isinstance(status, dict):
        return "failed", f"{url} answered with JSON that is not an object: {answer[:200]}", {}
    return "ok", f"status port answers ({status_summary(status)})", {"status": status}


def status_summary(status: dict[str, Any]) -> str:
    """What cuzk's /status says (it names no version: the release is what rollout knows)."""
    memory, counters = _dict(status.get("memory")), _dict(status.get("counters"))
    uptime = _num(status.get("uptime_secs"))
    up = f"up {uptime:.1f}s" if uptime is not None else "uptime unknown"
    return (f"{up}, budget {format_size(_int(memory.get('total_bytes')))}, "
            f"{counters.get('total_completed', '?')} proofs completed, "
            f"{counters.get('total_failed', '?')} failed")


def hung(out: dict[str, Any], timeout: float) -> bool:
    """The proof was stopped by its timeout (not by a wait for budget)."""
    code, elapsed = _int(out.get("exit")), _num(out.get("elapsed")) or 0.0
    return out.get("outcome") == "ran" and (
        code == TIMED_OUT or (code == KILLED and elapsed >= timeout))


def validate(args: list[dict[str, Any]], docs: list[dict[str, Any]]) -> Verdict:
    """The proof's own result block decides (proof_verdict on its stdout, never its exit
    code nor the host's word)."""
    out, kw = docs[-1], args[-1]
    timeout = _num(kw.get("timeout")) or 0.0
    if out.get("outcome") != "ran":
        return "failed", _text(out.get("reason")) or "the proof did not run", {}
    if hung(out, timeout):
        return "failed", f"validation hung (no result in {timeout:g} s): killed", {"hung": True}
    stdout = _text(out.get("stdout"), 1 << 24)
    passed, why = proof_verdict(stdout, _text(kw.get("pattern"), 1000))
    if not passed:
        return "failed", f"validation failed: {why} (exit {_int(out.get('exit'))})", {}
    return "ok", "validation proof COMPLETED", {}


JUDGES = {"stop": stop, "drain": drain, "switch": switch, "start": start, "ready": ready,
          "validate": validate}
