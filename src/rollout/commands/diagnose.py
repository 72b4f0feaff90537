"""`rollout diagnose`: collect bounded evidence from hosts in parallel, name the last exit's cause.

Collection reads through the same transport and fact readers as a rollout and changes
nothing on a host. Classification (`classify`) is pure: facts and evidence in, verdict out.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from typing import Any, TypeVar

from rollout.commands.fleet import connect
from rollout.engine.guard import left_lines
from rollout.engine.plan import Plan
from rollout.errors import HostAnswerError, RolloutError, StepFailed
from rollout.host.facts import HostFacts
from rollout.host.layout import Layout
from rollout.host.scripts import script_text
from rollout.output.escape import report_text
from rollout.secrets import tail
from rollout.steps.base import HostContext, StepTimeout
from rollout.units import format_size

OOM_KILL = "oom-kill"
EXTERNAL_SIGKILL = "external-sigkill"
PANIC = "panic"
GPU_FAULT = "gpu-fault"
CRASH = "crash"
CLEAN_EXIT = "clean-exit"
STOPPED_BY_TOOL = "stopped-by-tool"
UNKNOWN = "unknown"
CAUSES = (OOM_KILL, EXTERNAL_SIGKILL, PANIC, GPU_FAULT, CRASH, CLEAN_EXIT, STOPPED_BY_TOOL,
          UNKNOWN)
RUST_PANIC_EXIT = 101
KERNEL_WINDOW_S = 30.0
PANIC_RE = re.compile(r"panicked at|\bpanic\b", re.IGNORECASE)
GPU_RE = re.compile(r"CUDA_ERROR|cudaError|CUDA error|\bXid\b|NVRM", re.IGNORECASE)
OOM_LOG_RE = re.compile(r"out of memory|memory allocation of \d+ bytes failed", re.IGNORECASE)
KERNEL_OOM_RE = re.compile(r"(out of memory|oom).*Killed process (\d+) \(([^)]*)\)",
                           re.IGNORECASE)
LIGHT_ARGS = ("--window-bytes", 256 * 1024, "--tail-lines", 0, "--max-matches", 20,
              "--kmsg-records", 0, "--records", 5)
T = TypeVar("T")


@dataclass(frozen=True)
class Verdict:
    cause: str
    summary: str
    evidence: list[str] = field(default_factory=list)
    missing: list[str] = field(default_factory=list)


@dataclass
class HostEvidence:
    host: str
    reachable: bool
    facts: HostFacts = field(default_factory=HostFacts)
    diag: dict[str, Any] = field(default_factory=dict)
    error: str | None = None
    transfer_bytes: int = 0
    seconds: float = 0.0
    guards: list[str] = field(default_factory=list)  # light: what guards did, not yet shown
    unknown: bool = False  # it answered, but with what rollout cannot take (error: why)


# ---------------------------------------------------------------- collection


def diagnose_script() -> str:
    """The host-side diagnose script with common.py inlined, as it is sent."""
    return script_text("diagnose")


def _json_script(ctx: HostContext, text: str, args: tuple[object, ...],
                 timeout: float) -> tuple[dict[str, Any], int]:
    """Run a host script (through the host's agent, where it has one); its JSON (last
    stdout line) and the bytes that came back."""
    result = ctx.run_python(text, *args, timeout=timeout)
    size = len(result.stdout.encode()) + len(result.stderr.encode())
    try:
        data = json.loads(result.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError, RecursionError) as e:
        raise HostAnswerError(f"diagnose on host gave no JSON (exit {result.exit_code}): "
                              f"{tail((result.stderr or result.stdout).strip(), 300)!a}") from e
    return (data if isinstance(data, dict) else {}), size


def host_context(plan: Plan, name: str) -> HostContext:
    """A connected context for one host; raises a RolloutError when it is unreachable."""
    host = plan.host(name)
    return HostContext(host=host, transport=connect(host), layout=Layout(plan.root),
                       settings=plan.settings_for(name))


def collect_host(plan: Plan, name: str, light: bool = False) -> HostEvidence:
    """Facts and bounded evidence from one host. Unreachable is data, never an exception."""
    started = time.monotonic()
    try:
        ctx = host_context(plan, name)
    except RolloutError as e:
        return HostEvidence(name, False, error=str(e), seconds=time.monotonic() - started)
    try:
        args: tuple[object, ...] = ("--root", plan.root, *(LIGHT_ARGS if light else ()))
        old_log = str(ctx.host_vars.get("old_daemon_log") or "")
        if old_log and not light:  # the log a hand-started daemon wrote (docs/adopt.md)
            args = (*args, "--old-log", old_log)
        facts, facts_size = _facts(ctx)
        diag, diag_size = _json_script(ctx, diagnose_script(), args, 30)
        guards = left_lines(ctx) if light else []  # status shows what guards did
    except HostAnswerError as e:  # hostile data: this host is unknown, the others go on
        return HostEvidence(name, False, error=str(e), seconds=time.monotonic() - started,
                            unknown=True)
    except RolloutError as e:
        return HostEvidence(name, False, error=str(e), seconds=time.monotonic() - started)
    finally:
        ctx.transport.close()
    return HostEvidence(name, True, HostFacts.parse(facts), diag,
                        transfer_bytes=facts_size + diag_size,
                        seconds=round(time.monotonic() - started, 3), guards=guards)


def _facts(ctx: HostContext) -> tuple[dict[str, Any], int]:
    """The host's facts (ops.facts: no digests, no ports) and the bytes of its report."""
    try:
        report = ctx.call("facts", call_timeout=30, root=ctx.layout.root)
    except StepTimeout:
        raise
    except StepFailed as e:  # no report, or not one of ops.facts
        raise HostAnswerError(str(e)) from e
    if report.get("outcome") != "read":
        raise HostAnswerError(f"ops.facts on host gave no facts: {tail(str(report), 300)!a}")
    return report, len(json.dumps(report).encode())


def in_parallel(names: list[str], fn: Callable[[str], T], workers: int) -> list[T]:
    """fn of each name, at most `workers` at once (the playbook's rolling.concurrency)."""
    with ThreadPoolExecutor(max_workers=max(1, min(workers, len(names)))) as pool:
        return list(pool.map(fn, names))


def collect(plan: Plan, light: bool = False) -> list[HostEvidence]:
    return in_parallel(list(plan.host_names), lambda n: collect_host(plan, n, light),
                       plan.playbook.rolling.concurrency)


# ---------------------------------------------------------------- classification (pure)


def _when(t: Any) -> str:
    if not isinstance(t, (int, float)):
        return "?"
    return time.strftime("%Y-%m-%d %H:%M:%SZ", time.gmtime(float(t)))


def describe_exit(rec: dict[str, Any]) -> str:
    how = f"signal {rec['signal']}" if rec.get("signal") else f"exit code {rec.get('exit_code')}"
    mem = rec.get("memory") or {}
    memory = f"{format_size(mem.get('usage'))} of {format_size(mem.get('limit'))}"
    return (f"exits.jsonl: pid {rec.get('pid')} release {rec.get('release')} ended by {how} "
            f"at {_when(rec.get('time'))} after {rec.get('uptime_secs')} s; memory at exit "
            f"{memory}; held={bool(rec.get('held'))}")


def _exits(facts: HostFacts, diag: dict[str, Any]) -> tuple[dict[str, Any] | None,
                                                            dict[str, Any] | None]:
    recs = [r for r in (diag.get("exits") or []) if isinstance(r, dict)]
    if recs:
        return recs[-1], (recs[-2] if len(recs) > 1 else None)
    return facts.last_exit, None


def _death_run(facts: HostFacts, diag: dict[str, Any], exit_rec: dict[str, Any]) -> int:
    """Which run of the log ended in this exit: 0 the last one, 1 if a restart followed."""
    starts = [s for s in (diag.get("starts") or []) if isinstance(s, dict)]
    last_start = starts[-1] if starts else facts.last_start
    if isinstance(last_start, dict) and float(last_start.get("time") or 0) > float(
            exit_rec.get("time") or 0):
        return 1
    return 0


def _run_lines(diag: dict[str, Any], run: int) -> list[str]:
    """Matched log lines of one run, each followed by the line after it when that helps."""
    out: list[str] = []
    for m in (diag.get("log") or {}).get("matches") or []:
        if m.get("run") == run:
            out.append(f"daemon.log: {m.get('line')}")
            if PANIC_RE.search(str(m.get("line"))) and m.get("next"):
                out.append(f"daemon.log: {m['next']}")
    return out


def _counter_delta(exit_rec: dict[str, Any], prev: dict[str, Any] | None) -> tuple[list[str],
                                                                                   list[str]]:
    """(OOM evidence, plain notes) from the cgroup counters the supervisor recorded."""
    now = exit_rec.get("oom") or {}
    before = (prev or {}).get("oom") or {}
    found: list[str] = []
    notes: list[str] = []
    for key in ("oom_kill", "oom"):
        if now.get(key) is None:
            continue
        if prev is None:
            if now[key]:
                found.append(f"cgroup {key} = {now[key]} at exit (no earlier exit to compare)")
            else:
                notes.append(f"cgroup {key} = 0 at exit")
        elif (now[key] or 0) > (before.get(key) or 0):
            found.append(f"cgroup {key} rose {before.get(key) or 0} -> {now[key]} since the "
                         "previous exit")
        else:
            notes.append(f"cgroup {key} unchanged ({now[key]}) since the previous exit")
    if not now:
        notes.append("no cgroup OOM counters recorded at exit")
    return found, notes


def _kernel_oom(diag: dict[str, Any], exit_rec: dict[str, Any]) -> tuple[list[str], list[str]]:
    kernel = diag.get("kernel") or {}
    if not kernel.get("readable"):
        why = kernel.get("error") or "not collected"
        return [], [f"kernel messages unreadable ({why})"]
    t = float(exit_rec.get("time") or 0)
    hits = []
    for rec in kernel.get("lines") or []:
        m = KERNEL_OOM_RE.search(str(rec.get("line")))
        near = isinstance(rec.get("time"), (int, float)) and abs(rec["time"] - t) < KERNEL_WINDOW_S
        if m and near and (str(m.group(2)) == str(exit_rec.get("pid")) or "cuzk" in m.group(3)):
            hits.append(f"kernel: {rec['line']}")
    return hits, ([] if hits else [f"no OOM kill in kernel messages near {_when(t)}"])


def _kernel_gpu(diag: dict[str, Any], exit_rec: dict[str, Any]) -> list[str]:
    t = float(exit_rec.get("time") or 0)
    return [f"kernel: {r['line']}" for r in (diag.get("kernel") or {}).get("lines") or []
            if GPU_RE.search(str(r.get("line"))) and isinstance(r.get("time"), (int, float))
            and abs(r["time"] - t) < KERNEL_WINDOW_S]


def _memory_note(exit_rec: dict[str, Any]) -> list[str]:
    mem = exit_rec.get("memory") or {}
    usage, limit = mem.get("usage"), mem.get("limit")
    if isinstance(usage, int) and isinstance(limit, int) and limit:
        return [f"memory at exit {format_size(usage)} of {format_size(limit)} "
                f"({100 * usage / limit:.0f}% of the cgroup limit)"]
    return []


SHUTDOWN_RE = re.compile(r"shutting down|shutdown|exiting|received SIG", re.IGNORECASE)


def _oom_now(diag: dict[str, Any]) -> dict[str, Any]:
    """The cgroup's OOM counters now, under the names the supervisor records them by."""
    cg = diag.get("cgroup") or {}
    if cg.get("version") == 2:
        events = cg.get("events") or {}
        return {"oom": events.get("oom"), "oom_kill": events.get("oom_kill")}
    if cg.get("version") == 1:
        return {"oom_kill": (cg.get("oom_control") or {}).get("oom_kill"),
                "failcnt": cg.get("failcnt")}
    return {}


def _last_log_line(diag: dict[str, Any]) -> str | None:
    tail = (diag.get("log") or {}).get("tail") or []
    return str(tail[-1].get("line")) if tail and isinstance(tail[-1], dict) else None


def whole_tree_kill(facts: HostFacts, diag: dict[str, Any]) -> Verdict | None:
    """The daemon and its supervisor both gone, and no exit record for the daemon's last
    start: something killed the whole tree at once (the provider's watchdog), or the
    container restarted. None when that is not what the host shows."""
    sup, daemon = facts.supervisor, facts.daemon
    if not sup.pid or sup.alive or daemon.running or daemon.state == "none":
        return None
    exit_rec, _ = _exits(facts, diag)
    starts: list[dict[str, Any]] = [s for s in (diag.get("starts") or []) if isinstance(s, dict)]
    if not starts and facts.last_start:
        starts = [facts.last_start]
    started = float(starts[-1].get("time") or 0) if starts else 0.0
    if exit_rec is not None and float(exit_rec.get("time") or 0) >= started:
        return None  # the supervisor recorded this daemon's end
    raw_state = diag.get("supervisor_state")
    state: dict[str, Any] = raw_state if isinstance(raw_state, dict) else {}
    beat = state.get("updated") if isinstance(state.get("updated"), (int, float)) else None
    evidence = [f"supervisor pid {sup.pid} gone; its last heartbeat (supervisor.json) at "
                f"{_when(beat)}, state {state.get('state')}",
                f"daemon pid {daemon.pid} gone ({daemon.note or 'not running'}); no exit "
                "record after its start at " + _when(started)]
    line = _last_log_line(diag)
    if line is not None and not SHUTDOWN_RE.search(line):
        evidence.append(f"daemon.log ends without a shutdown line: {line!r}")
    before, now = state.get("oom") or {}, _oom_now(diag)
    rose = [k for k, v in now.items() if isinstance(v, int) and v > (before.get(k) or 0)]
    container = (diag.get("container") or {}).get("started_at")
    restarted = isinstance(container, (int, float)) and beat is not None and container > beat
    if restarted:
        evidence.append(f"the container restarted at {_when(container)}, after the last "
                        "heartbeat: every process in it was killed")
    elif isinstance(container, (int, float)):
        evidence.append(f"container up since {_when(container)} (not restarted since the "
                        "last heartbeat)")
    if rose:
        return Verdict(OOM_KILL, "killed by the OOM killer (supervisor killed too)", evidence
                       + [f"cgroup {k} rose {before.get(k) or 0} -> {now[k]} since the last "
                          "heartbeat" for k in rose])
    evidence.append(f"cgroup OOM counters unchanged since the last heartbeat ({now or 'n/a'})")
    what = "container restarted" if restarted else "external-sigkill"
    return Verdict(EXTERNAL_SIGKILL, f"{what} (supervisor killed too): daemon and supervisor "
                   "gone at once, no exit record, no OOM evidence", evidence)


def classify(facts: HostFacts, diag: dict[str, Any]) -> Verdict:
    """Name the cause of the last daemon exit from the facts and the collected evidence."""
    tree = whole_tree_kill(facts, diag)
    if tree is not None:
        return tree
    exit_rec, prev = _exits(facts, diag)
    if exit_rec is None:
        return Verdict(UNKNOWN, "no daemon exit recorded", missing=[
            "no exit record in <root>/rollout/exits.jsonl (no supervisor, or no exit yet)"])
    base = [describe_exit(exit_rec)]
    if exit_rec.get("held"):
        return Verdict(STOPPED_BY_TOOL, "stopped by rollout (hold set before the stop)",
                       base + ["hold file present at exit: rollout stop/drain asked for it"])
    lines = _run_lines(diag, _death_run(facts, diag, exit_rec))
    return _classify_unheld(exit_rec, prev, diag, base, lines)


def _classify_unheld(exit_rec: dict[str, Any], prev: dict[str, Any] | None,
                     diag: dict[str, Any], base: list[str], lines: list[str]) -> Verdict:
    sig, code = exit_rec.get("signal"), exit_rec.get("exit_code")
    missing = [] if (diag.get("log") or {}).get("exists") else ["no daemon log"]
    oom_counters, counter_notes = _counter_delta(exit_rec, prev)
    oom_kernel, kernel_notes = _kernel_oom(diag, exit_rec)
    oom_log = [ln for ln in lines if OOM_LOG_RE.search(ln)]
    panics = [ln for ln in lines if PANIC_RE.search(ln)]
    gpu = [ln for ln in lines if GPU_RE.search(ln)] + _kernel_gpu(diag, exit_rec)
    no_status = sig is None and code is None
    if (sig or no_status) and (oom_counters or oom_kernel):
        note = ["no exit status recorded; the OOM counters show the kill"] if no_status else []
        return Verdict(OOM_KILL, f"killed by the kernel OOM killer ({sig or 'status unknown'})",
                       base + oom_counters + oom_kernel + oom_log + _memory_note(exit_rec) + note)
    if sig == "SIGKILL":
        quiet = "no panic, CUDA or OOM line in the log before death" if not lines else None
        return Verdict(EXTERNAL_SIGKILL, "SIGKILL from outside with no OOM evidence: most "
                       "likely the provider's memory watchdog",
                       base + counter_notes + kernel_notes + _memory_note(exit_rec)
                       + ([quiet] if quiet else lines[-5:]), missing)
    if panics:
        extra = " (its message names a CUDA error)" if any(GPU_RE.search(p) for p in panics) else ""
        return Verdict(PANIC, f"crashed with a panic{extra}", base + panics[:6])
    if gpu:
        return Verdict(GPU_FAULT, "GPU/CUDA fault", base + gpu[:8])
    if code == RUST_PANIC_EXIT:
        return Verdict(PANIC, "exit code 101 (Rust's panic exit code); no panic line found",
                       base + ["exit code 101 is what a Rust panic exits with"],
                       missing + ["the panic line (not in the scanned end of the log)"])
    if code == 0:
        return Verdict(CLEAN_EXIT, "exited cleanly (code 0) without being asked to",
                       base + ["no hold file at exit: rollout did not stop it"] + lines[-3:])
    if sig in ("SIGSEGV", "SIGABRT", "SIGBUS", "SIGILL", "SIGFPE") or code:
        return Verdict(CRASH, f"crashed ({sig or f'exit code {code}'}) without a panic line",
                       base + lines[-8:], missing + ["a panic or CUDA error line"])
    return Verdict(UNKNOWN, f"ended by {sig or 'an unknown status'} while no hold was set",
                   base + lines[-5:], missing + [
                       f"who sent {sig}: not rollout (no hold file)" if sig
                       else "the exit status (the supervisor could not reap it)"])


# ---------------------------------------------------------------- rendering


def report_dict(ev: HostEvidence) -> dict[str, Any]:
    out: dict[str, Any] = {"host": ev.host, "reachable": ev.reachable, "error": ev.error,
                           "seconds": ev.seconds, "transfer_bytes": ev.transfer_bytes}
    if not ev.reachable:
        out["verdict"] = asdict(Verdict(UNKNOWN, "host unreachable", missing=[str(ev.error)]))
        return out
    log = ev.diag.get("log") or {}
    out["verdict"] = asdict(classify(ev.facts, ev.diag))
    out["last_exit"], _ = _exits(ev.facts, ev.diag)
    out["log_files"] = log.get("files")
    out["log_tail"] = [t.get("line") for t in log.get("tail") or []]
    out["log_matches"] = [m.get("line") for m in log.get("matches") or []]
    old = ev.diag.get("old_log") or {}
    if old:
        out["old_log_files"] = old.get("files")
        out["old_log_matches"] = [m.get("line") for m in old.get("matches") or []]
        out["old_log_tail"] = [t.get("line") for t in old.get("tail") or []]
    out["cgroup"] = ev.diag.get("cgroup")
    out["kernel"] = ev.diag.get("kernel")
    out["supervisor_state"] = ev.diag.get("supervisor_state")
    out["exits"] = ev.diag.get("exits")
    out["errors"] = {**ev.facts.errors, **(ev.diag.get("errors") or {})}
    return out


def render_text(report: dict[str, Any]) -> str:
    v = report["verdict"]
    head = f"== {report['host']}: {v['cause']}: {v['summary']}"
    if not report["reachable"]:
        return f"{head}\n   {report['error']}\n"
    lines = [head, "   evidence:"] + [f"     - {e}" for e in v["evidence"]]
    if v["missing"]:
        lines += ["   missing:"] + [f"     - {m}" for m in v["missing"]]
    files = ", ".join(f"{f['path']} ({format_size(f['size'])}, last "
                      f"{format_size(f['scanned_bytes'])} scanned)"
                      for f in report.get("log_files") or [])
    lines.append(f"   log: {files or 'none'}")
    lines += ["   error-pattern matches:"] + [f"     {m}" for m in report["log_matches"][-15:]]
    lines += ["   log tail:"] + [f"     {t}" for t in report["log_tail"][-15:]]
    if report.get("old_log_files") is not None:
        old = ", ".join(f["path"] for f in report.get("old_log_files") or []) or "none"
        lines.append(f"   old log (host var old_daemon_log): {old}")
        lines += [f"     {m}" for m in (report.get("old_log_matches") or [])[-10:]]
        lines += [f"     {t}" for t in (report.get("old_log_tail") or [])[-10:]]
    kernel = report.get("kernel") or {}
    lines.append("   kernel: " + ("readable" if kernel.get("readable")
                                   else f"unreadable ({kernel.get('error')})"))
    lines.append(f"   collected in {report['seconds']} s, {report['transfer_bytes']} bytes")
    return "\n".join(lines) + "\n"


def diagnose(plan: Plan, as_json: bool) -> int:
    """Print the report for every host of the plan; exit code 1 when a host was unreachable."""
    reports = [report_dict(ev) for ev in collect(plan)]
    if as_json:
        print(json.dumps(reports, indent=2, default=str))
    else:
        print(report_text("\n".join(render_text(r) for r in reports)))  # hosts: no raw escapes
    return 0 if all(r["reachable"] for r in reports) else 1


def bench_diagnose(plan: Plan, host: str) -> dict[str, float]:
    """Benchmark figures of one host's diagnose: seconds (connect included) and bytes back."""
    started = time.monotonic()
    ev = collect_host(plan, host)
    if not ev.reachable:
        raise StepFailed(f"benchmark host {host} unreachable: {ev.error}")
    return {"diagnose_seconds": round(time.monotonic() - started, 3),
            "diagnose_transfer_bytes": float(ev.transfer_bytes)}
