"""rollout guard: a controller's death never leaves this host stopped, and a guard never
touches a host its controller did not change.

The controller starts it over a channel of its own (ahead, while upload and preflight run):

    python3 -c BOOTSTRAP --arm   (stdin: the script's length, this script, a recipe line,
                                  then ops.py after its length)

The recipe is JSON data, never code: the run, the root, the release being rolled out and
the rollback plan for each phase ("rollback"), computed by the controller's own
rollback_plan (rollout.engine.hostplan) with, for each of its steps, the host actions it
calls and their keyword arguments (the budget figure, the validation command rendered for
the release it goes back to...). The guard has no decider and no host action of its own:
it runs the plan of the phase the controller last reported, each step as the calls of
ops.py (rollout's host API, the very functions the controller's steps call) it names.

The foreground part holds an flock on a tether file while its stdin stays open and answers
{"ready": true}. Started, it is inert: only an "arm PHASE" line (the host is about to leave
untouched) arms it, answered {"armed": true}; then it records each "phase NAME" line, and a
"settled" line when the controller is done with the host. A detached part (setsid, double
fork, stdio to a log) blocks on that flock. When the tether drops, a guard never armed (or
settled) exits doing nothing. An armed one takes over, only while <root>/rollout/lock names
its run (checked again before every step), it runs the plan of its phase: stop the new
daemon, point current back at the previous release with its config, release the hold, wait
until that daemon is ready and validate it with its own bench; or, with no previous release,
stop it and leave the host stopped and held (as the controller's rollback does). Each host
action checks before it acts; each step is one JSON event line in
<root>/rollout/runs/<run_id>/guard.jsonl, with the controller's fields.

    python3 - --report --root /data --run RUN_ID --wait 600 < guard.py

waits until every guard of that run is settled or has ended, then prints what they did;

    python3 - --left --root /data --wait 900 [--mark] < guard.py

waits until no guard of any run is at the host, then prints what the guards that acted did,
for the runs not yet shown (--mark: shown from now on).
Standard library only; python3 >= 3.9.
"""

from __future__ import annotations

import argparse
import fcntl
import json
import os
import re
import shutil
import sys
import time
from collections.abc import Callable
from typing import Any

# ruff: noqa: E501
# isort: off
from rollout.host.scripts.common import read_text, safe_mkdir, safe_open, safe_write  # inlined on hosts
from rollout.host.scripts.judge import drain_kwargs, verdict  # inlined on hosts
# isort: on

RUN_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$")
PHASES = ("untouched", "stopped", "switched", "started", "validated")
POLL = 0.1  # seconds between looks at local state (never at the controller)
# ops.py is loaded only by a guard that takes over: arming, once per host, starts no more
# than it needs.
KEEP_RUNS = 20  # run folders always kept, newest first
PRUNE_AGE = 7 * 86400  # seconds: older run folders whose guards are all done are removed
MAX_SCRIPT = 1 << 20  # bytes: the script the arm input carries (ops.py)


# ---------------------------------------------------------------- paths and records


def run_dir(root: str, run_id: str) -> str:
    if not RUN_ID.match(run_id) or ".." in run_id:
        raise ValueError(f"not a run id: {run_id!r}")
    return os.path.join(root, "rollout", "runs", run_id)


def write_json(path: str, obj: dict[str, Any]) -> None:
    safe_write(path, json.dumps(obj, sort_keys=True).encode())  # never through a link


def read_json(path: str) -> dict[str, Any]:
    try:
        obj = json.loads(read_text(path) or "{}")
    except ValueError:
        return {}
    return obj if isinstance(obj, dict) else {}


class Events:
    """guard.jsonl: one JSON line per event, the controller's event fields."""

    def __init__(self, path: str, recipe: dict[str, Any], guard: str) -> None:
        self.path = path
        self.run_id = str(recipe.get("run_id"))
        self.host = recipe.get("host")
        self.guard = guard

    def emit(self, event_kind: str, step: str | None = None, status: str | None = None,
             reason: str | None = None, **data: Any) -> None:
        event = {"kind": event_kind, "run_id": self.run_id, "host": self.host, "step": step,
                 "status": status, "reason": reason, "data": {**data, "guard": self.guard},
                 "time": time.time()}
        fd = safe_open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        with os.fdopen(fd, "a") as f:
            f.write(json.dumps(event, sort_keys=True, default=str) + "\n")
            f.flush()
            os.fsync(f.fileno())


class Failed(Exception):
    """A takeover step failed; its reason is the message."""


# ---------------------------------------------------------------- the plan (the controller's)

KINDS = ("stop", "drain", "switch", "start", "ready", "validate")  # rollback step kinds


def planned(recipe: dict[str, Any], state: dict[str, Any],
            validated: dict[str, Any] | None = None) -> tuple[str, dict[str, Any]]:
    """(why, the plan) once the tether dropped: the controller's rollback plan for the phase
    it last reported (recipe["rollback"][phase]: steps, to, outcome, rolled_back, and the
    host actions each step calls). Nothing to do for a guard settled or never armed, for an
    untouched host, or where the daemon running now already passed validation
    (Host.validated_daemon: the host is in fact validated). Decides nothing itself; Failed
    for a plan that is missing or names an unknown step."""
    nothing: dict[str, Any] = {"steps": [], "calls": [], "to": None, "rolled_back": False,
                               "outcome": ""}
    if state.get("settled"):
        return "the controller settled the host: nothing to do", nothing
    if not state.get("armed"):
        return "never armed (the host never left untouched in this run): nothing to do", nothing
    phase = str(state.get("phase") or "untouched")
    release = recipe.get("release")
    if phase not in PHASES[1:]:
        return "the host was untouched: a guard never changes an untouched host", nothing
    if validated and phase != "validated":
        return (f"daemon {validated.get('pid')} (start time {validated.get('starttime')}) "
                f"already passed the validation of release {release} "
                f"({validated.get('path')}): kept, nothing to do"), nothing
    plans = recipe.get("rollback")
    plan = plans.get(phase) if isinstance(plans, dict) else None
    steps = plan.get("steps") if isinstance(plan, dict) else None
    if not isinstance(plan, dict) or not isinstance(steps, list) \
            or not all(isinstance(k, str) and k in KINDS for k in steps):
        raise Failed(f"no usable rollback plan for phase {phase} in the recipe: {plan!r:.200}")
    to = plan.get("to") if isinstance(plan.get("to"), str) else None
    if "switch" in steps and to is None:
        raise Failed(f"the rollback plan for phase {phase} switches, but names no release")
    what = str(plan.get("describe") or plan.get("outcome") or "")
    why = f"the host had validated release {release}: nothing to do" if phase == "validated" \
        else what
    calls = plan.get("calls") if isinstance(plan.get("calls"), list) else []
    return why, {"steps": steps, "calls": calls, "to": to,
                 "rolled_back": plan.get("rolled_back") is True,
                 "outcome": str(plan.get("outcome") or "")}


# ---------------------------------------------------------------- the host, through ops.py


def load_ops(path: str) -> Any:
    """ops.py (rollout's host API: the functions the controller's steps call), as the arm
    input carried it into the run's folder: a module of its own, never through a link."""
    import types

    fd = safe_open(path, os.O_RDONLY)
    with os.fdopen(fd, "rb") as f:
        source = f.read(MAX_SCRIPT + 1)
    module = types.ModuleType("ops")
    exec(compile(source, path, "exec"), module.__dict__)  # noqa: S102 - rollout's own, sent by its controller
    return module


class Host:
    def __init__(self, recipe: dict[str, Any], ops: Any = None) -> None:
        self.r = recipe
        self.root = str(recipe["root"])
        self.run_dir = run_dir(self.root, str(recipe["run_id"]))
        self.hold = os.path.join(self.root, "rollout", "hold")
        self.to: str | None = None  # the release the plan goes back to (None: none)
        self._ops = ops

    @property
    def ops(self) -> Any:
        if self._ops is None:
            self._ops = load_ops(os.path.join(self.run_dir, "ops.py"))
        return self._ops

    def current_release(self) -> str | None:
        found: str | None = self.ops.current_release(self.root)
        return found

    def validated_daemon(self) -> dict[str, Any] | None:
        """The evidence (validated.json, read as hostile data) that the daemon running now,
        the same pid AND start time, passed the validation of the release being rolled out,
        which current points at with no hold set; None when there is none."""
        release = self.r.get("release")
        path = os.path.join(self.root, "rollout", "validated.json")
        try:
            with open(path, "rb") as f:
                doc = json.loads(f.read(4096))
        except (OSError, ValueError):
            return None
        if not isinstance(doc, dict) or not isinstance(release, str) or doc.get("release") != release:
            return None
        pid, starttime = doc.get("pid"), doc.get("starttime")
        if not all(isinstance(v, int) and not isinstance(v, bool) for v in (pid, starttime)):
            return None
        d = self.ops.serving(self.root, release)
        if d is None or (d[0], d[1]) != (pid, starttime) or self.current_release() != release:
            return None
        if os.path.exists(self.hold):
            return None
        return {"pid": pid, "starttime": starttime, "release": release, "path": path}


# ---------------------------------------------------------------- the host lock


def lock_owner(root: str) -> tuple[str | None, str]:
    """(the run id <root>/rollout/lock names, its text as found): hostile data."""
    try:
        with open(os.path.join(root, "rollout", "lock"), "rb") as f:
            text = f.read(4096).decode("utf-8", "replace")
    except FileNotFoundError:
        return None, ""
    except OSError as e:
        return None, f"<unreadable: {e.strerror}>"
    try:
        doc = json.loads(text)
    except ValueError:
        doc = None
    run_id = doc.get("run_id") if isinstance(doc, dict) else None
    return (run_id if isinstance(run_id, str) else None), text


def not_ours(root: str, run_id: str) -> str | None:
    """Why a guard of `run_id` may not act on the host now (None: the host lock is its run's)."""
    owner, text = lock_owner(root)
    if owner == run_id:
        return None
    if owner is not None:
        return f"the host lock names run {owner[:128]!r}, not {run_id}: another run holds the host"
    if text:
        return f"the host lock names no run ({text[:80]!r}): not acting"
    return f"no host lock of run {run_id}: its controller gave the host back"


# ---------------------------------------------------------------- takeover: the plan's calls

def run_entry(h: Host, entry: dict[str, Any], stopped: dict[str, Any]) -> tuple[str, str, dict[str, Any]]:
    """Run one step of the plan: each of its host calls (ops.<call>(**kwargs)), in order,
    read by the one judge (judge.py, the controller's steps' too); (status, reason, data).
    What only the guard knows goes in here: a daemon of the release it goes back to is kept
    (stop, drain), and the drain waits for the daemon `stopped` (the stop step's data) names."""
    calls = entry.get("calls") if isinstance(entry.get("calls"), list) else None
    if not calls:
        raise Failed(f"no host call for step {entry.get('step')!r} in the recipe")
    reports = []
    for c in calls:
        entry_call = c if isinstance(c, dict) else {}
        name, given = str(entry_call.get("call")), entry_call.get("kwargs")
        kwargs: dict[str, Any] = dict(given) if isinstance(given, dict) else {}
        if name in ("stop", "drain") and h.to:
            kwargs["keep_release"] = h.to
        if name == "drain":
            kwargs = drain_kwargs(kwargs, stopped)
        reports.append(h.ops.call(name, kwargs))
    status, reason, data = verdict(str(entry.get("step")), calls, reports)
    if status == "failed" and not entry.get("tolerate"):
        raise Failed(reason)
    if status == "failed":  # a guard never leaves the host stopped for a drain
        reason += f"; restarting {h.to} without waiting again (its memory is still charged)"
    return status, reason, data


def take_over(h: Host, events: Events, state: dict[str, Any]) -> str:
    """Run the controller's plan for the phase; returns the guard's final status: validated,
    held (no previous release: left stopped and held, as planned), failed or yielded."""
    validated = None if state.get("settled") else h.validated_daemon()
    phase = state.get("phase") or "untouched"
    try:
        summary, plan = planned(h.r, state, validated)
    except Failed as e:
        events.emit("guard_end", status="failed", reason=str(e), phase=phase,
                    release=h.current_release())
        return "failed"
    steps: list[str] = plan["steps"]
    h.to = plan["to"]
    entries = {e.get("step"): e for e in plan["calls"] if isinstance(e, dict)}
    events.emit("guard_takeover", status="takeover",
                reason=f"controller lost in phase {phase}: {summary}", phase=phase, steps=steps,
                evidence=validated)
    tolerated: dict[str, str] = {}
    stopped: dict[str, Any] = {}
    for kind in steps:
        why = not_ours(h.root, str(h.r.get("run_id")))
        if why:  # another run has the host: it decides from the host's real state
            events.emit("guard_end", status="yielded", reason=f"stopped before {kind}: {why}",
                        phase=phase, release=h.current_release(), yielded=kind)
            return "yielded"
        name = f"guard-{kind}"
        events.emit("step_start", step=name, kind=kind)
        started = time.monotonic()
        try:
            status, reason, data = run_entry(h, entries.get(kind) or {"step": kind}, stopped)
        except Exception as e:  # noqa: BLE001 - whatever fails is this step's failure
            reason = str(e) if isinstance(e, Failed) else f"{type(e).__name__}: {e}"
            events.emit("step_end", step=name, status="failed", reason=reason, attempts=1,
                        duration=round(time.monotonic() - started, 3), output="")
            events.emit("guard_end", status="failed", reason=f"{kind} failed: {reason}",
                        phase=phase, release=h.current_release(), failed=kind)
            return "failed"
        stopped = data if kind == "stop" else stopped
        events.emit("step_end", step=name, status=status, reason=reason, attempts=1,
                    duration=round(time.monotonic() - started, 3), output="",
                    **(data if kind in ("stop", "drain") else {}))
        if status == "failed":  # a failed drain: reported, and the takeover goes on
            tolerated[kind] = reason
    release = h.current_release() if steps else h.r.get("release")
    end = "validated" if plan["rolled_back"] or not steps else "held"
    events.emit("guard_end", status=end, reason=summary if end == "validated" else plan["outcome"],
                phase=phase, release=release,
                rolled_back=plan["rolled_back"], acted=bool(steps),
                failed_steps=tolerated, evidence=validated)
    return end


def uncordon_after(h: Host, events: Events) -> None:
    """A host is never left cordoned: the recipe's uncordon call (ops.uncordon with the
    user's command the controller rendered; it runs only where rollout's record says the
    host is cordoned), whatever the takeover's end, as a step of its own."""
    entry = h.r.get("uncordon")
    kwargs = entry.get("kwargs") if isinstance(entry, dict) else None
    if not isinstance(kwargs, dict):
        return
    started = time.monotonic()
    try:
        report = h.ops.call("uncordon", dict(kwargs))
    except Exception as e:  # noqa: BLE001 - said in the step's event
        report = {"outcome": "failed", "reason": f"{type(e).__name__}: {e}"}
    outcome = report.get("outcome")
    status = "changed" if outcome == "uncordoned" else "skipped" if outcome == "none" \
        else "failed"
    events.emit("step_end", step="guard-uncordon", status=status,
                reason=str(report.get("reason") or ""), attempts=1,
                duration=round(time.monotonic() - started, 3),
                output=str(report.get("output") or "")[-500:])


# ---------------------------------------------------------------- arm: tether and detach


def lock_wait(path: str, seconds: float) -> int | None:
    """An fd holding LOCK_EX on `path`, waiting up to `seconds` (None: not got)."""
    fd = safe_open(path, os.O_RDWR | os.O_CREAT, 0o600)
    end = time.monotonic() + seconds
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return fd
        except OSError:
            if time.monotonic() >= end:
                os.close(fd)
                return None
            time.sleep(POLL)


def detach(body: Callable[[], None], log: str) -> None:
    """Run body() in a process of its own session (double fork), stdio to `log`."""
    pid = os.fork()
    if pid:
        os.waitpid(pid, 0)
        return
    try:
        os.setsid()
        if os.fork():
            os._exit(0)
        null = os.open(os.devnull, os.O_RDONLY)
        out = safe_open(log, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        os.dup2(null, 0)
        os.dup2(out, 1)
        os.dup2(out, 2)
        os.closerange(3, 65536)  # the tether's fd too: the lock stays the foreground's alone
        body()
    except BaseException as e:  # noqa: BLE001 - the log says why, the process ends
        sys.stderr.write(f"guard: {type(e).__name__}: {e}\n")
    finally:
        os._exit(0)


def watcher(recipe: dict[str, Any], tether: str, state_path: str, events: Events) -> Callable[[], None]:
    def body() -> None:
        try:
            watch()
        except BaseException as e:  # ended all the same: nobody waits for it (busy_runs)
            write_json(state_path, {**read_json(state_path), "ended": "failed",
                                    "reason": f"guard: {type(e).__name__}: {e}"})
            raise

    def watch() -> None:
        fd = os.open(tether, os.O_RDWR)
        fcntl.flock(fd, fcntl.LOCK_EX)  # blocks until the foreground ends: no polling
        state = read_json(state_path)
        if state.get("settled"):
            return
        if not state.get("armed") or state.get("phase") not in PHASES[1:]:
            summary, _ = planned(recipe, state)
            write_json(state_path, {**state, "ended": "inert", "reason": summary})
            return  # a guard that was never armed never acts: no event, nothing to report
        guard_lock = os.path.join(str(recipe["root"]), "rollout", "guard.lock")
        lock = safe_open(guard_lock, os.O_RDWR | os.O_CREAT, 0o600)
        fcntl.flock(lock, fcntl.LOCK_EX)
        why = not_ours(str(recipe["root"]), str(recipe["run_id"]))
        if why:
            events.emit("guard_exit", status="yielded", reason=why,
                        phase=state.get("phase"))
            write_json(state_path, {**state, "ended": "yielded", "reason": why})
            return
        write_json(state_path + ".takeover", {"phase": state.get("phase"), "time": time.time(),
                                              "pid": os.getpid()})
        host = Host(recipe)
        try:
            ended = take_over(host, events, state)
        finally:
            if not not_ours(str(recipe["root"]), str(recipe["run_id"])):
                uncordon_after(host, events)
        write_json(state_path, {**state, "ended": ended})
    return body


def read_sized(stdin: Any) -> bytes | None:
    """A "LENGTH\n" line, then that many bytes; None when either is missing or too big."""
    head = stdin.readline(32).strip()
    if not head.isdigit() or not 0 < int(head) <= MAX_SCRIPT:
        return None
    data = stdin.read(int(head))
    return data if len(data) == int(head) else None


def write_bytes(path: str, data: bytes) -> None:
    safe_write(path, data)  # never through a link


def run_done(where: str) -> bool:
    """Every guard of a run folder is settled or has ended, and none holds its tether."""
    for name in os.listdir(where):
        m = re.match(r"^state\.(\d+)\.json$", name)
        if m:
            state = read_json(os.path.join(where, name))
            if not (state.get("settled") or state.get("ended")) or tethered(where, m.group(1)):
                return False
        elif name.startswith("tether.") and tethered(where, name[len("tether."):]):
            return False
    return True


def last_change(where: str) -> float:
    """The newest mtime of a run folder and what is in it."""
    times = [os.lstat(where).st_mtime]
    for name in os.listdir(where):
        try:
            times.append(os.lstat(os.path.join(where, name)).st_mtime)
        except OSError:
            continue
    return max(times)


def prune_runs(runs: str, keep: str, now: float | None = None) -> list[str]:
    """Remove run folders older than PRUNE_AGE whose guards are all done, past the newest
    KEEP_RUNS; never `keep` (this run's), a symlink, or one whose tether is held."""
    now = time.time() if now is None else now
    found: list[tuple[float, str]] = []
    try:
        for entry in os.scandir(runs):
            if entry.is_dir(follow_symlinks=False) and RUN_ID.match(entry.name) \
                    and ".." not in entry.name:
                found.append((last_change(entry.path), entry.name))
    except OSError:
        return []
    found.sort(reverse=True)
    removed = []
    for changed, name in found[KEEP_RUNS:]:
        where = os.path.join(runs, name)
        try:
            if name == keep or now - changed < PRUNE_AGE or not run_done(where):
                continue
            shutil.rmtree(where)
        except OSError:
            continue
        removed.append(name)
    return removed


def arm(stdin: Any, stdout: Any, wait: float) -> int:
    recipe = json.loads(stdin.readline().decode("utf-8"))
    ops_script = read_sized(stdin)
    root = str(recipe["root"])
    where = run_dir(root, str(recipe["run_id"]))
    if ops_script is None:
        say(stdout, {"ready": False, "reason": "no ops script after the recipe"})
        return 2
    try:  # a link in place of runs/, the run's folder or a file in it: refused, named
        safe_mkdir(where, mode=0o700)
        write_bytes(os.path.join(where, "ops.py"), ops_script)
    except OSError as e:
        say(stdout, {"ready": False, "reason": f"refused: {e}"})
        return 2
    pruned = prune_runs(os.path.join(root, "rollout", "runs"), keep=os.path.basename(where))
    earlier = lock_wait(os.path.join(root, "rollout", "guard.lock"), wait)
    if earlier is None:  # an earlier guard is still taking over: the controller must not act
        say(stdout, {"ready": False, "reason": "an earlier guard is still taking over"})
        return 1
    os.close(earlier)
    me = str(os.getpid())
    tether = os.path.join(where, f"tether.{me}")
    state_path = os.path.join(where, f"state.{me}.json")
    fd = safe_open(tether, os.O_RDWR | os.O_CREAT, 0o600)
    fcntl.flock(fd, fcntl.LOCK_EX)
    state: dict[str, Any] = {"phase": "untouched", "guard": me, "armed": False}
    write_json(state_path, state)
    events = Events(os.path.join(where, "guard.jsonl"), recipe, me)
    detach(watcher(recipe, tether, state_path, events), os.path.join(where, "guard.log"))
    if say(stdout, {"ready": True, "guard": me, "events": events.path, "pruned": pruned}):
        for raw in iter(stdin.readline, b""):
            if not follow(state, raw.decode("utf-8", "replace").strip()):
                continue
            write_json(state_path, state)
            if state.get("armed") and raw.startswith(b"arm ") and not say(stdout, {"armed": True}):
                break  # the channel is gone: the tether drops, armed
    if not state.get("settled"):  # the watcher's turn: busy until it ends (busy_runs)
        write_json(state_path, {**state, "dropped": True})
    return 0  # EOF: the tether drops as this process ends


def follow(state: dict[str, Any], line: str) -> bool:
    """Apply one line of the controller to the guard's state; True when it changed it.
    `arm PHASE`: the host is about to leave untouched (its first stop, switch or start);
    only an armed guard may ever act. `phase PHASE` once armed; `settled`: done."""
    word, _, arg = line.partition(" ")
    if word == "arm" and arg in PHASES[1:]:
        state.update(armed=True, phase=arg)
    elif word == "phase" and arg in PHASES and state.get("armed"):
        state["phase"] = arg
    elif word == "settled":
        state["settled"] = True
    else:
        return False
    return True


def say(stdout: Any, answer: dict[str, Any]) -> bool:
    """One answer line to the controller; False when its channel is gone."""
    try:
        stdout.write(json.dumps(answer) + "\n")
        stdout.flush()
    except OSError:
        return False
    return True


# ---------------------------------------------------------------- report


def report(root: str, run_id: str, wait: float) -> dict[str, Any]:
    """Every guard of the run once each is settled or has ended (or `wait` has passed)."""
    where = run_dir(root, run_id)
    end = time.monotonic() + wait
    while True:
        names = sorted(n for n in os.listdir(where) if re.match(r"^state\.\d+\.json$", n)) \
            if os.path.isdir(where) else []
        states = [read_json(os.path.join(where, n)) for n in names]
        pending = [s for s in states if not s.get("settled") and not s.get("ended")
                   and tethered(where, str(s.get("guard")))]
        if not pending or time.monotonic() >= end:
            break
        time.sleep(POLL)
    text = read_text(os.path.join(where, "guard.jsonl")) or ""
    events = []
    for line in text.splitlines():
        try:
            events.append(json.loads(line))
        except ValueError:
            continue
    return {"guards": states, "events": events, "pending": len(pending)}


def busy_runs(runs: str) -> list[str]:
    """The runs with a guard still at it, neither settled nor ended: its tether held (by
    its controller's channel, or by its watcher), or dropped and its watcher not done."""
    busy = []
    for name in sorted(os.listdir(runs)) if os.path.isdir(runs) else []:
        where = os.path.join(runs, name)
        if not RUN_ID.match(name) or os.path.islink(where) or not os.path.isdir(where):
            continue
        for entry in os.listdir(where):
            m = re.match(r"^state\.(\d+)\.json$", entry)
            if not m:
                continue
            state = read_json(os.path.join(where, entry))
            if not (state.get("settled") or state.get("ended")) and (
                    state.get("dropped") or tethered(where, m.group(1))):
                busy.append(name)
                break
    return busy


def acted(where: str, guards: list[dict[str, Any]]) -> bool:
    """Whether a run's guards did something to report: took over (ended, or under way), or
    yielded to another run. Not a guard still tethered to its live controller (a run in
    progress), one settled, or one never armed."""
    for g in guards:
        guard = str(g.get("guard"))
        if g.get("settled") or g.get("ended") == "inert":
            continue
        if g.get("ended") or os.path.exists(os.path.join(where, f"state.{guard}.json.takeover")):
            return True
        if not tethered(where, guard):  # its processes gone without a word: say so
            return True
    return False


def left(root: str, wait: float, mark: bool) -> dict[str, Any]:
    """Before a command touches the host: wait (up to `wait`) until no guard is at it, then
    what every guard that acted did, for the runs not yet shown; `mark`: shown from now on."""
    runs = os.path.join(root, "rollout", "runs")
    end = time.monotonic() + wait
    busy = busy_runs(runs)
    while busy and time.monotonic() < end:
        time.sleep(POLL)
        busy = busy_runs(runs)
    found = []
    for name in sorted(os.listdir(runs)) if os.path.isdir(runs) else []:
        where = os.path.join(runs, name)
        if not RUN_ID.match(name) or os.path.islink(where) or not os.path.isdir(where) \
                or os.path.exists(os.path.join(where, "shown")):
            continue
        try:
            got = report(root, name, 0)
            if not acted(where, got["guards"]):
                continue
            found.append({"run": name, "time": last_change(where), **got})
            if mark and name not in busy:
                safe_write(os.path.join(where, "shown"), f"{time.time()}\n".encode())
        except OSError:  # a folder that cannot be read (or marked) is shown again next time
            continue
    found.sort(key=lambda r: r["time"])
    return {"busy": busy, "runs": found}


def tethered(where: str, guard: str) -> bool:
    """True while a guard's tether is held: by its foreground (a controller attached), or by
    its detached part taking over. A guard whose processes are all gone holds nothing."""
    tether = os.path.join(where, f"tether.{guard}")
    try:
        fd = os.open(tether, os.O_RDONLY)
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        return False
    except OSError:
        return True
    finally:
        os.close(fd)


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--arm", action="store_true", help="read a recipe line from stdin and stand guard")
    p.add_argument("--report", action="store_true")
    p.add_argument("--left", action="store_true", help="what guards left on the host did")
    p.add_argument("--mark", action="store_true", help="--left: shown from now on")
    p.add_argument("--root", default="/data")
    p.add_argument("--run", default="")
    p.add_argument("--wait", type=float, default=600.0)
    args = p.parse_args(argv)
    if args.arm:
        return arm(sys.stdin.buffer, sys.stdout, args.wait)
    if args.left:
        print(json.dumps(left(args.root, args.wait, args.mark), sort_keys=True))
        return 0
    print(json.dumps(report(args.root, args.run, args.wait), sort_keys=True))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
