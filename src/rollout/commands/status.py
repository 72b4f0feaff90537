"""`rollout status`: one row per host (state, release, uptime, restarts, memory, last exit and
its cause), fleet capacity, and a watch mode. Reads only; changes nothing on a host."""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rollout.commands.diagnose import HostEvidence, classify, collect, whole_tree_kill
from rollout.commands.fleet import load_fleet_used
from rollout.engine.plan import Plan
from rollout.errors import UserError
from rollout.host.facts import HostFacts
from rollout.output.console import print_table
from rollout.output.escape import control_escaped
from rollout.secrets import head
from rollout.units import format_size

SERVING = "running"
UNKNOWN = "unknown"  # a host whose answer was malformed, oversized or late
COLUMNS = ["host", "state", "release", "version", "uptime", "restarts_1h", "memory",
           "last_exit", "cause", "on_restart"]


def daemon_state(facts: HostFacts) -> str:
    """running, zombie, stopped, held, blocked, crash-looping or dead (no daemon and no
    supervisor to restart it), from the host's facts."""
    if facts.supervisor.state == "crash-looping":
        return "crash-looping"
    if facts.supervisor.alive and facts.supervisor.state == "blocked":
        return "blocked"
    if facts.daemon.state in ("running", "zombie"):
        return facts.daemon.state
    if facts.supervisor.pid and not facts.supervisor.alive:
        return "dead"  # nothing runs it and nothing will restart it
    return "held" if facts.held else "stopped"


def _last_exit_text(rec: Any, now: float) -> str | None:
    if not isinstance(rec, dict):
        return None
    t = rec.get("time")
    ago = f" {format_duration(now - float(t))} ago" if isinstance(t, (int, float)) else ""
    if rec.get("recorded") is False:
        return f"unrecorded (last heartbeat{ago})" if ago else "unrecorded"
    return f"{exit_how(rec)}{ago}"


def exit_how(rec: dict[str, Any]) -> str:
    """How an exit record says the daemon ended: its signal, its exit code, or unrecorded."""
    if rec.get("recorded") is False:
        return "unrecorded"
    if rec.get("signal"):
        return str(rec["signal"])
    code = rec.get("exit_code")
    return f"code {code}" if code is not None else "unknown"


def format_duration(secs: float | None) -> str:
    if secs is None:
        return "-"
    s = int(max(0.0, float(secs)))
    if s >= 86400:
        return f"{s // 86400}d{(s % 86400) // 3600:02d}h"
    if s >= 3600:
        return f"{s // 3600}h{(s % 3600) // 60:02d}m"
    if s >= 60:
        return f"{s // 60}m{s % 60:02d}s"
    return f"{s}s"


def supervisor_state(facts: HostFacts) -> str | None:
    """The supervisor's own state, or "dead": then nothing restarts the daemon."""
    supervisor = facts.supervisor
    if supervisor.pid and not supervisor.alive:
        return "dead"
    return supervisor.state if supervisor.alive else None


def unrecorded_exit(diag: dict[str, Any]) -> dict[str, Any]:
    """The daemon's death when its supervisor died with it (no exit record): no status, and
    for a time the supervisor's last heartbeat, the last moment both were seen alive."""
    state = diag.get("supervisor_state")
    beat = state.get("updated") if isinstance(state, dict) else None
    return {"recorded": False, "signal": None, "exit_code": None,
            "time": beat if isinstance(beat, (int, float)) else None}


def host_row(ev: HostEvidence) -> dict[str, Any]:
    """The status of one host as plain data (the JSON output is a list of these)."""
    if ev.unknown:
        return unknown_row(ev.host, str(ev.error))
    if not ev.reachable:
        return {"host": ev.host, "state": "unreachable", "serving": False, "error": ev.error}
    try:
        return _host_row(ev)
    except Exception as e:  # noqa: BLE001 - one host's answers never end the fleet's status
        return unknown_row(ev.host, f"its answer could not be read: {type(e).__name__}: "
                                    f"{head(str(e), 200)}")


def unknown_row(host: str, why: str) -> dict[str, Any]:
    """A host that answered with what rollout cannot take: its state is unknown."""
    return {"host": host, "state": UNKNOWN, "serving": False, "error": why}


def _host_row(ev: HostEvidence) -> dict[str, Any]:
    facts, diag = ev.facts, ev.diag
    release = diag.get("release") if isinstance(diag.get("release"), dict) else {}
    tree = whole_tree_kill(facts, diag)  # a death after the last exit record
    verdict = tree or classify(facts, diag)
    last_exit = unrecorded_exit(diag) if tree else facts.last_exit
    state = daemon_state(facts)
    return {
        "host": ev.host, "state": state, "serving": state == SERVING, "pid": facts.daemon.pid,
        "release": facts.current_release, "version": (release or {}).get("version"),
        "uptime_secs": facts.daemon.uptime_secs,
        "restarts_last_hour": facts.restarts_last_hour,
        "restart_count_complete": facts.exit_counts_complete,
        "restarts_total": facts.restarts_total,
        "memory_used": facts.memory.usage, "memory_limit": facts.memory.limit,
        # the drain's figure: usage less the page cache no live process maps
        "memory_working_set": facts.memory.working_set,
        "memory_page_cache": facts.memory.page_cache,
        "supervisor": supervisor_state(facts),
        "supervisor_reason": facts.supervisor.reason if facts.supervisor.alive else None,
        "supervisor_registered": facts.registered or "none",
        "cordoned_by": facts.cordoned,  # the run whose cordon is not undone (heal undoes it)
        "last_exit": last_exit,  # the death the cause names, never an earlier one
        "last_exit_how": exit_how(last_exit) if last_exit else None,
        "last_exit_cause": verdict.cause if last_exit else None,
        "last_exit_summary": verdict.summary if last_exit else None,
        "time": facts.time,
        "guards": ev.guards,  # what guards left on the host did, until a run shows it
        "host_id": facts.host_id,  # what machine this is (<root>/rollout/host-id)
    }


@dataclass(frozen=True)
class Capacity:
    serving: int
    total: int

    @property
    def share(self) -> float:
        return self.serving / self.total if self.total else 0.0


def capacity(rows: list[dict[str, Any]]) -> Capacity:
    return Capacity(sum(1 for r in rows if r.get("serving")), len(rows))


def table_row(row: dict[str, Any], now: float) -> dict[str, Any]:
    gone = "gone" if row["state"] == "dead" else "dead"
    dead = f" (supervisor {gone})" if row.get("supervisor") == "dead" else ""
    cordoned = f" (cordoned by run {row['cordoned_by']})" if row.get("cordoned_by") else ""
    out = {"host": row["host"], "state": row["state"] + dead + cordoned}
    if row["state"] in ("unreachable", UNKNOWN):
        return {**out, "last_exit": str(row.get("error") or "")[:60]}
    restarts = row.get("restarts_last_hour")
    return {
        **out,
        "release": str(row.get("release") or "-")[:12], "version": row.get("version") or "-",
        "uptime": format_duration(row.get("uptime_secs")),
        "restarts_1h": "-" if restarts is None else
        f"{restarts}{'' if row.get('restart_count_complete', True) else '+'}",
        "memory": _memory_text(row),
        "last_exit": _last_exit_text(row.get("last_exit"), now) or "-",
        "cause": (str(row.get("supervisor_reason") or "")[:80] if row["state"] == "blocked"
                  else row.get("last_exit_cause") or "-"),
        "on_restart": str(row.get("supervisor_registered") or "none")[:40],
    }


def _memory_text(row: dict[str, Any]) -> str:
    """The working set the drain measures, and raw usage beside it, against the limit."""
    used, limit = format_size(row.get("memory_used")), format_size(row.get("memory_limit"))
    if row.get("memory_working_set") is None:
        return f"{used} / {limit}"
    return f"{format_size(row.get('memory_working_set'))} (raw {used}) / {limit}"


def fleet_rows(plan: Plan) -> list[dict[str, Any]]:
    return same_machines([host_row(ev) for ev in collect(plan, light=True)])


def same_machines(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Rows of entries that reached one machine (the same host id) get "same_machine_as":
    the other entries' names. A rollout refuses them all; status says why."""
    by_id: dict[str, list[str]] = {}
    for row in rows:
        if row.get("host_id"):
            by_id.setdefault(str(row["host_id"]), []).append(str(row["host"]))
    for row in rows:
        names = by_id.get(str(row.get("host_id")), []) if row.get("host_id") else []
        if len(names) > 1:
            row["same_machine_as"] = [n for n in names if n != row["host"]]
    return rows


def print_status(rows: list[dict[str, Any]], as_json: bool,
                 used: dict[str, Any] | None = None) -> None:
    cap = capacity(rows)
    if as_json:
        doc = {"used": used, "hosts": rows, "capacity": {"serving": cap.serving, "total": cap.total,
                                           "share": round(cap.share, 3)}}
        print(json.dumps(doc, indent=2, default=str))
        return
    now = time.time()
    title = (f"fleet status {time.strftime('%H:%M:%S')}: {cap.serving}/{cap.total} serving "
             f"({100 * cap.share:.0f}%)")
    print_table([table_row(r, now) for r in rows], COLUMNS, title)
    for row in rows:
        for line in row.get("guards") or []:
            print(control_escaped(f"{row['host']}  guard  {line}"))
        if row.get("same_machine_as"):
            print(control_escaped(
                f"{row['host']}  same machine as {', '.join(row['same_machine_as'])} (host id "
                f"{str(row.get('host_id'))[:12]}...): a rollout refuses both entries; list "
                "each machine once"))


DOWN = ("dead", "unreachable")


def check_capacity(rows: list[dict[str, Any]], min_capacity: float | None) -> int:
    """1 when fewer than `min_capacity` of the hosts serve; with no minimum, 1 when any host
    is dead or unreachable (a minimum is how an operator tolerates some)."""
    if min_capacity is None:
        return check_down(rows)
    cap = capacity(rows)
    if cap.share + 1e-9 < min_capacity:
        print(f"capacity {cap.serving}/{cap.total} ({100 * cap.share:.0f}%) is below the "
              f"minimum {100 * min_capacity:.0f}%", file=sys.stderr)
        return 1
    return 0


def check_down(rows: list[dict[str, Any]]) -> int:
    down = [f"{r['host']} ({r['state']})" for r in rows if r.get("state") in DOWN]
    if not down:
        return 0
    print(control_escaped(f"{len(down)} of {len(rows)} hosts dead or unreachable: "
                          f"{', '.join(down)} (--min-capacity SHARE tolerates some)"),
          file=sys.stderr)
    return 1


def status(hosts_file: str, playbook: str | None, limit: str | None, as_json: bool,
           min_capacity: float | None = None, prom: str | None = None) -> int:
    """Print the fleet status once (and write it as Prometheus metrics to `prom`); 1 when
    a host is dead or unreachable, or, given min_capacity, when fewer than that share of
    the hosts serve."""
    if min_capacity is not None and not 0.0 <= min_capacity <= 1.0:
        raise UserError(f"--min-capacity must be a share between 0 and 1, got {min_capacity}")
    plan, used = load_fleet_used(hosts_file, playbook, limit)
    rows = fleet_rows(plan)
    if prom:
        from rollout.reports import prom as prom_file  # prometheus_client: only for --prom

        prom_file.write(Path(prom), rows, time.time())
    print_status(rows, as_json, used.as_json())
    return check_capacity(rows, min_capacity)


def watch(once: Callable[[], int], interval: float,
          sleep: Callable[[float], None] = time.sleep, rounds: int | None = None) -> int:
    """Refresh the status every `interval` seconds until Ctrl-C; the last exit code."""
    code = 0
    done = 0
    try:
        while rounds is None or done < rounds:
            if sys.stdout.isatty():
                print("\033[2J\033[H", end="")
            code = once()
            done += 1
            if rounds is None or done < rounds:
                sleep(interval)
    except KeyboardInterrupt:
        pass
    return code
