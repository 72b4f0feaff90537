"""rollout supervisor: keeps the cuzk daemon running on one host, and cannot hang.

Uploaded to <root>/rollout/supervisor.py and started detached:

    python3 supervisor.py --root /data --daemon-args '-c /data/zk/cuzk.toml' --daemonize

Options may also come from <root>/rollout/supervisor.conf.json (keys are the long option
names with underscores: daemon_args, launcher, backoff_initial, ...); flags win.

The loop polls every 100 ms and reaps with os.waitpid(-1, WNOHANG) only: it never blocks
on a child (a blocking `wait -n` is what left fleets without a prover for days).
Standard library only; runs on python3 >= 3.9.
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import errno
import fcntl
import json
import os
import shlex
import signal
import subprocess
import sys
import time
from typing import Any

# script_text() replaces the next line with common.py: it stays one line
# ruff: noqa: E501
# isort: off
from rollout.host.scripts.common import cgroup_memory, port_owners, read_int, distrust_daemon, distrust_supervisor, proc_program, proc_start_epoch, proc_starttime, proc_stat, proc_state, read_pidfile, read_text, safe_append, safe_open, safe_remove, safe_write, working_memory  # inlined on hosts
# isort: on

DEFAULTS: dict[str, Any] = {
    "daemon_args": "",
    "launcher": "",
    "backoff_initial": 1.0,
    "backoff_max": 30.0,
    "crash_loop_restarts": 5,
    "crash_loop_window": 300.0,
    "reset_after": 60.0,
    "poll_interval": 0.1,
    "discover_timeout": 2.0,
    "launcher_grace": 10.0,
    "reap_grace": 60.0,
    "log_max_bytes": 512 * 1024 * 1024,
    "cgroup_root": "/sys/fs/cgroup",
    "proc": "/proc",
    # The daemon (and all it starts) is the OOM killer's first choice, never the supervisor
    # that would restart it: raising a child's score needs no privilege, lowering ours would.
    "daemon_oom_score_adj": 1000,
    # The supervisor's own score, set at start where privilege allows (root on a rented
    # host). The killer can strike twice in a row, before the daemon's memory is back: the
    # second strike must take a login session, never the one process that records the
    # exit and restarts the daemon.
    "supervisor_oom_score_adj": -900,
    "ports": [],  # the daemon's TCP ports: never start it while another process holds one
    "heartbeat": 3.0,  # seconds between supervisor.json rewrites (its "updated" time)
    # Extra environment for the daemon, e.g. {"NO_COLOR": "1"}: cuzk logs ANSI colour
    # codes unless NO_COLOR is set, and those would split every line a grep looks for.
    "daemon_env": {},
}


# ---------------------------------------------------------------- small helpers


def oom_first(score: int) -> Any:
    """A pre-exec hook that sets the child's oom_score_adj (best effort)."""

    def apply() -> None:
        with contextlib.suppress(OSError), open("/proc/self/oom_score_adj", "w") as f:
            f.write(str(score))

    return apply


def daemon_environment(extra: Any) -> dict[str, str]:
    """This process's environment plus the configured extra variables (strings only)."""
    env = dict(os.environ)
    if isinstance(extra, dict):
        env.update({str(k): str(v) for k, v in extra.items()})
    return env


def now() -> float:
    return time.time()


def unlink_quiet(path: str) -> None:
    with contextlib.suppress(OSError):
        safe_remove(path)


def write_atomic(path: str, text: str) -> None:
    """Replace `path` whole, never through a link (common.safe_write)."""
    safe_write(path, text.encode(), 0o644)


def append_line(path: str, obj: dict[str, Any]) -> None:
    safe_append(path, json.dumps(obj, sort_keys=True) + "\n", 0o644)


def children_map(proc: str) -> dict[int, list[int]]:
    kids: dict[int, list[int]] = {}
    try:
        names = os.listdir(proc)
    except OSError:
        return kids
    for name in names:
        if not name.isdigit():
            continue
        fields = proc_stat(proc, int(name))
        if fields is None or len(fields) < 2:
            continue
        try:
            kids.setdefault(int(fields[1]), []).append(int(name))
        except ValueError:
            continue
    return kids


def release_of(root: str) -> str | None:
    try:
        return os.path.basename(os.readlink(os.path.join(root, "current")).rstrip("/"))
    except OSError:
        return None


def describe_status(status: int | None) -> dict[str, Any]:
    if status is None:
        return {"exit_code": None, "signal": None}
    if os.WIFSIGNALED(status):
        num = os.WTERMSIG(status)
        try:
            name = signal.Signals(num).name
        except ValueError:
            name = f"SIG{num}"
        return {"exit_code": None, "signal": name}
    if os.WIFEXITED(status):
        return {"exit_code": os.WEXITSTATUS(status), "signal": None}
    return {"exit_code": None, "signal": None}


def set_child_subreaper() -> bool:
    """Orphaned descendants (a launcher's child) get reparented to us and reaped here."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return int(libc.prctl(36, 1, 0, 0, 0)) == 0  # PR_SET_CHILD_SUBREAPER
    except (OSError, AttributeError):
        return False


# ---------------------------------------------------------------- the supervisor


class Daemon:
    """One started daemon (or one adopted from a previous supervisor)."""

    def __init__(self, child: int | None, started: float, release: str | None, exe: str) -> None:
        self.child = child  # our direct child (the daemon, or the launcher); None if adopted
        self.pid: int | None = None  # the daemon itself, once known
        self.starttime: int | None = None
        self.started = started
        self.release = release
        self.exe = exe
        self.discover_until = started
        self.child_status: int | None = None  # status of our direct child once reaped
        self.own_status: int | None = None  # status of the daemon pid itself, if we reaped it
        self.died_at: float | None = None
        self.launcher_note: str | None = None
        self.baseline: dict[str, Any] | None = None  # memory just before it started
        self.backoff = 0.0  # the restart delay the supervisor waited before starting it
        self.awaiting_status = False  # dead, but its exit status is not collectible yet
        self.held_at_death: bool | None = None  # was the hold set when it was seen dead


class Supervisor:
    def __init__(self, cfg: dict[str, Any]) -> None:
        self.cfg = cfg
        self.root: str = cfg["root"]
        self.dir = os.path.join(self.root, "rollout")
        self.proc: str = cfg["proc"]
        self.daemon: Daemon | None = None
        self.state = ""
        self.since = now()
        self.reason: str | None = None
        self.next_start = 0.0  # time.monotonic(): a wall-clock jump must not stall restarts
        self.delay = 0.0  # the backoff chosen for the next start (0: none, e.g. after a hold)
        self.failures = 0
        self.restarts: list[float] = []
        self.stop_requested = False
        self.last_json = 0.0
        self.reaped: dict[int, int] = {}
        self.echo = not cfg.get("daemonize")

    # paths
    def path(self, name: str) -> str:
        return os.path.join(self.dir, name)

    def log(self, msg: str) -> None:
        line = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime()) + f"Z supervisor: {msg}\n"
        with contextlib.suppress(OSError):
            safe_append(self.path("supervisor.log"), line, 0o644)
        if self.echo:
            sys.stderr.write(line)
            sys.stderr.flush()

    def append(self, name: str, rec: dict[str, Any]) -> None:
        """One JSON line more in <root>/rollout/NAME; a failure is logged, never raised."""
        try:
            append_line(self.path(name), rec)
        except OSError as e:
            self.log(f"cannot write {name}: {e}")

    def held(self) -> bool:
        return os.path.exists(self.path("hold"))

    def daemon_path(self) -> str:
        return os.path.join(self.root, "current", "cuzk-daemon")

    # state file
    def set_state(self, state: str, reason: str | None = None) -> None:
        if state != self.state or reason != self.reason:
            self.state, self.reason, self.since = state, reason, now()
            self.log(f"state {state}" + (f" ({reason})" if reason else ""))
            self.write_json()

    def write_json(self) -> None:
        d = self.daemon
        window = float(self.cfg["crash_loop_window"])
        self.restarts = [t for t in self.restarts if t >= now() - window]
        doc = {
            "state": self.state,
            "since": self.since,
            "reason": self.reason,
            "daemon_pid": d.pid if d is not None else None,  # the record daemon.pid must match
            "daemon_starttime": d.starttime if d is not None else None,
            "daemon_exe": d.exe if d is not None else None,
            "release": d.release if d is not None else None,
            "restarts": self.restarts,
            "consecutive_failures": self.failures,
            "next_start_at": (
                now() + max(0.0, self.next_start - time.monotonic())
                if self.state in ("backoff", "crash-looping")
                else None
            ),
            "supervisor_pid": os.getpid(),
            "updated": now(),  # the heartbeat: rewritten every cfg["heartbeat"] seconds
            "oom": cgroup_memory(self.cfg["cgroup_root"])["oom"],  # to tell a later kill by
        }
        try:
            write_atomic(self.path("supervisor.json"), json.dumps(doc, sort_keys=True) + "\n")
        except OSError as e:
            self.log(f"cannot write supervisor.json: {e}")
        self.last_json = now()

    # reaping: never blocks
    def reap(self) -> None:
        while True:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            except OSError as e:
                if e.errno == errno.EINTR:
                    continue
                return
            if pid == 0:
                return
            self.reaped[pid] = status

    def adopt(self) -> None:
        """A daemon left running by a previous supervisor keeps running: track it, start none."""
        pid, starttime, exe = read_pidfile(self.path("daemon.pid")) or (0, None, "")
        if starttime is None:
            return
        if proc_state(self.proc, pid, starttime)[0] != "running":
            self.log(f"daemon.pid names pid {pid}, which is not running: ignored")
            self.remove_pidfile()
            return
        distrust = distrust_daemon(self.proc, self.root, pid, starttime, exe)
        if distrust:
            self.log(f"daemon.pid not trusted, not adopted: {distrust}")
            self.remove_pidfile()
            return
        rel = os.path.basename(os.path.dirname(exe)) if exe else release_of(self.root)
        d = Daemon(None, proc_start_epoch(self.proc, starttime) or now(), rel, exe)
        d.pid, d.starttime = pid, starttime
        self.daemon = d
        self.log(f"adopted running daemon pid {pid} ({exe})")

    def remove_pidfile(self) -> None:
        unlink_quiet(self.path("daemon.pid"))

    def rotate_log(self) -> None:
        path = self.path("daemon.log")
        try:
            if os.path.getsize(path) > int(self.cfg["log_max_bytes"]):
                os.replace(path, path + ".1")
        except OSError:
            pass

    def start(self) -> None:
        exe = os.path.realpath(self.daemon_path())
        release = release_of(self.root)
        launcher = split_words(self.cfg["launcher"])
        argv = launcher + [exe] + split_words(self.cfg["daemon_args"])
        self.rotate_log()
        baseline = self.baseline()
        t = now()
        logf = os.fdopen(safe_open(self.path("daemon.log"), os.O_WRONLY | os.O_CREAT | os.O_APPEND,
                                   0o644), "a")  # handed to the child; never through a link
        try:
            logf.write(f"=== rollout supervisor: starting release {release}: {shlex.join(argv)}\n")
            logf.flush()
            child = subprocess.Popen(
                argv,
                cwd=self.root,
                stdin=subprocess.DEVNULL,
                stdout=logf,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                close_fds=True,
                env=daemon_environment(self.cfg["daemon_env"]),
                preexec_fn=oom_first(int(self.cfg["daemon_oom_score_adj"])),
            )
        except OSError as e:
            self.log(f"cannot start {argv}: {e}")
            self.after_exit(t, uptime=0.0, held=False)
            return
        finally:
            logf.close()
        # the Popen object is dropped: reaping is ours alone (waitpid(-1, WNOHANG))
        child.returncode = 0
        d = Daemon(child.pid, t, release, exe)
        d.baseline = baseline
        d.backoff = self.delay
        self.daemon = d
        if launcher:
            d.discover_until = t + float(self.cfg["discover_timeout"])
            self.log(f"started launcher pid {child.pid}: {shlex.join(argv)}")
            self.discover()
        else:
            self.found(child.pid)

    def discover(self) -> None:
        """With a launcher: the daemon is the nearest process that runs the executable, the
        launcher itself once it execs it (`exec "$@"`), else its nearest descendant. Breadth
        first, so a fork of the daemon's own (same program, one level down) is never taken
        for it; an argument that merely names the executable (the launcher's) is no match."""
        d = self.daemon
        if d is None or d.child is None or d.pid is not None:
            return
        kids = children_map(self.proc)
        level, seen = [d.child], {d.child}
        while level:
            for pid in level:
                if proc_program(self.proc, pid) == d.exe:
                    self.found(pid)
                    return
            level = [k for pid in level for k in kids.get(pid, []) if k not in seen]
            seen.update(level)
        if now() >= d.discover_until:
            self.log("daemon process not found under the launcher: tracking the launcher")
            d.launcher_note = "daemon not found under launcher; pid is the launcher's"
            self.found(d.child)

    def found(self, pid: int) -> None:
        d = self.daemon
        assert d is not None
        d.pid = pid
        d.starttime = proc_starttime(self.proc, pid)
        self.write_json()  # our own record first: daemon.pid is trusted only when it matches
        try:
            write_atomic(self.path("daemon.pid"), f"{pid} {d.starttime} {d.exe}\n")
        except OSError as e:
            self.log(f"cannot write daemon.pid: {e}")
        rec: dict[str, Any] = {
            "time": d.started,
            "pid": pid,
            "release": d.release,
            "exe": d.exe,
            "memory": self.memory(),
            "supervisor_pid": os.getpid(),
            "backoff": d.backoff,
        }
        if d.baseline is not None:
            rec["baseline"] = d.baseline
        if d.child is not None and d.child != pid:
            rec["launcher_pid"] = d.child
        if d.launcher_note:
            rec["note"] = d.launcher_note
        self.append("starts.jsonl", rec)
        self.log(f"daemon started: pid {pid} release {d.release}")
        self.set_state("running")
        self.write_json()

    def memory(self) -> dict[str, Any]:
        m = cgroup_memory(self.cfg["cgroup_root"])
        return {"usage": m["usage"], "limit": m["limit"], "source": m["source"]}

    def baseline(self) -> dict[str, Any]:
        """The memory before a daemon starts: a drain after it is done waits for no less."""
        m = working_memory(self.cfg["cgroup_root"], self.cfg["proc"])
        keys = ("usage", "limit", "source", "working_set", "page_cache")
        return {k: m.get(k) for k in keys}

    def check_daemon(self) -> None:
        """Detect the daemon's death; record it once its status is known (or given up on)."""
        d = self.daemon
        if d is None:
            return
        if d.child is not None and d.child in self.reaped:
            d.child_status = self.reaped.pop(d.child)
        if d.pid is not None and d.pid != d.child and d.pid in self.reaped:
            d.own_status = self.reaped.pop(d.pid)
        if d.pid is None:  # still looking for it under the launcher
            if d.child_status is not None:
                d.died_at, d.held_at_death = now(), self.held()
                self.record_exit()
            else:
                self.discover()
            return
        if d.died_at is None:
            dead = (
                d.own_status is not None
                or (d.child == d.pid and d.child_status is not None)
                or proc_state(self.proc, d.pid, d.starttime)[0] != "running"
            )
            if not dead:
                return
            d.died_at, d.held_at_death = now(), self.held()
            if d.child not in (None, d.pid) and d.own_status is None and d.child_status is None:
                self.log(f"daemon pid {d.pid} died; waiting for launcher pid {d.child}'s status")
        if d.child == d.pid and d.child_status is None:
            self.reap()  # died between this tick's reap and the check: collect its status now
            d.child_status = self.reaped.pop(d.child, None) if d.child is not None else None
            if d.child_status is None and now() - d.died_at < float(self.cfg["reap_grace"]):
                # Our child shows as a zombie, but waitpid has nothing yet: its other threads
                # are still exiting (a killed daemon that freed a lot of memory). Its status
                # comes on a later tick; record the exit then, not without it.
                if not d.awaiting_status:
                    d.awaiting_status = True
                    self.log(f"daemon pid {d.pid} is a zombie whose threads are still "
                             "exiting; waiting for its exit status")
                return
        # dead: the status is ours if the daemon was our child (or reparented to us)
        ours = d.child is None or d.child == d.pid or d.own_status is not None
        if ours or d.child_status is not None:
            self.record_exit()
        elif now() - d.died_at >= float(self.cfg["launcher_grace"]):
            d.launcher_note = f"launcher pid {d.child} still alive {self.cfg['launcher_grace']} s"
            self.record_exit()

    def record_exit(self) -> None:
        d = self.daemon
        assert d is not None
        died = d.died_at if d.died_at is not None else now()
        held = self.held() if d.held_at_death is None else d.held_at_death
        if d.own_status is not None or d.child == d.pid:
            status = d.own_status if d.own_status is not None else d.child_status
            status_from = "daemon" if status is not None else None
        else:
            status = d.child_status
            status_from = "launcher" if status is not None else None
        mem = cgroup_memory(self.cfg["cgroup_root"])
        rec: dict[str, Any] = {
            "time": died,
            "recorded": now(),
            "pid": d.pid,
            "release": d.release,
            "current_release": release_of(self.root),
            "uptime_secs": round(died - d.started, 3),
            "memory": {"usage": mem["usage"], "limit": mem["limit"], "source": mem["source"]},
            "oom": mem["oom"],
            "held": held,
            "status_from": status_from,
            "adopted": d.child is None,
        }
        rec.update(describe_status(status))
        if d.launcher_note:
            rec["note"] = d.launcher_note
        self.append("exits.jsonl", rec)
        how = rec["signal"] or f"exit code {rec['exit_code']}"
        self.log(f"daemon pid {d.pid} exited ({how}) after {rec['uptime_secs']} s, held={held}")
        self.remove_pidfile()
        self.daemon = None
        self.after_exit(died, died - d.started, held)

    def after_exit(self, died: float, uptime: float, held: bool) -> None:
        if held:
            self.failures = 0
            self.next_start = self.delay = 0.0
            return
        if uptime > float(self.cfg["reset_after"]):
            self.failures = 0
        self.failures += 1
        self.restarts.append(died)
        window = float(self.cfg["crash_loop_window"])
        self.restarts = [t for t in self.restarts if t >= died - window]
        bmax = float(self.cfg["backoff_max"])
        if len(self.restarts) >= int(self.cfg["crash_loop_restarts"]):
            self.delay = bmax
            self.next_start = time.monotonic() + bmax
            self.set_state(
                "crash-looping",
                f"{len(self.restarts)} exits within {window:g} s; next try in {bmax:g} s",
            )
        else:
            delay = min(float(self.cfg["backoff_initial"]) * 2 ** (self.failures - 1), bmax)
            self.delay = delay
            self.next_start = time.monotonic() + delay
            self.set_state("backoff", f"restart in {delay:g} s")
        self.write_json()

    def tick(self) -> None:
        self.reap()
        self.check_daemon()
        self.reaped.clear()  # anything else reaped (orphans) needs no bookkeeping
        if self.daemon is not None:
            if self.daemon.pid is not None:
                self.set_state("held" if self.held() else "running")
            return
        if self.held():
            self.set_state("held", "hold file present")
            return
        if not os.path.exists(self.daemon_path()):
            self.set_state("stopped", f"no daemon executable at {self.daemon_path()}")
            return
        if time.monotonic() < self.next_start:
            if self.state not in ("backoff", "crash-looping"):
                self.set_state("backoff")
            return
        holder = self.port_holder()
        if holder:
            self.set_state("blocked", holder)
            return
        self.start()

    def port_holder(self) -> str | None:
        """Who holds one of the daemon's ports, when a process does (a start would crash on
        "Address already in use"); None when they are free."""
        for port in self.cfg.get("ports") or []:
            try:
                owners = port_owners(self.proc, int(port))
            except (TypeError, ValueError):
                continue
            if owners:
                o = owners[0]
                return (f"port {port} held by pid {o['pid']} ({o['cmdline'] or '?'}): "
                        "not starting the daemon")
        return None

    def shield_from_oom(self, score: int) -> None:
        """Lower our own oom_score_adj to `score`. Without CAP_SYS_RESOURCE (Docker drops it,
        so a rented container has none, root or not) a process may still lower its score as
        far as 0, the floor it inherited: a supervisor started from a session at 500 goes
        back to 0, below the sessions. Never raises it; says what it got."""
        current = read_int("/proc/self/oom_score_adj")
        for want in dict.fromkeys((score, max(score, 0))):
            if current is not None and want >= current:
                break
            try:
                with open("/proc/self/oom_score_adj", "w") as f:
                    f.write(str(want))
                current = want
                break
            except OSError:
                continue
        if current != score:
            self.log(f"oom_score_adj {score} not allowed here (no CAP_SYS_RESOURCE): "
                     f"the supervisor runs at {current}")

    def run(self) -> int:
        os.makedirs(self.dir, exist_ok=True)
        me = os.getpid()
        write_atomic(self.path("supervisor.pid"), f"{me} {proc_starttime(self.proc, me)}\n")
        set_child_subreaper()
        self.log(f"supervisor started pid {me} config {json.dumps(self.cfg, sort_keys=True)}")
        self.shield_from_oom(int(self.cfg["supervisor_oom_score_adj"]))
        self.adopt()
        interval = float(self.cfg["poll_interval"])
        while not self.stop_requested:
            try:
                self.tick()
                if now() - self.last_json > float(self.cfg["heartbeat"]):
                    self.write_json()
            except Exception as e:  # the loop must survive anything
                self.log(f"error in loop: {type(e).__name__}: {e}")
            time.sleep(interval)
        self.reap()
        self.set_state("stopped", "supervisor terminated; daemon left running")
        self.write_json()
        unlink_quiet(self.path("supervisor.pid"))
        self.log("supervisor exiting")
        return 0


def split_words(value: Any) -> list[str]:
    if isinstance(value, list):
        return [str(v) for v in value]
    return shlex.split(str(value or ""))


# ---------------------------------------------------------------- start-up


def parse_args(argv: list[str]) -> dict[str, Any]:
    p = argparse.ArgumentParser(description="rollout supervisor for the cuzk daemon")
    p.add_argument("--root", default="/data")
    p.add_argument("--config", help="JSON config (default <root>/rollout/supervisor.conf.json)")
    p.add_argument("--daemon-args", help="arguments for cuzk-daemon, one shell-quoted string")
    p.add_argument("--launcher", help="command prefix, e.g. 'lab-late-reaper 3 --'")
    p.add_argument("--backoff-initial", type=float)
    p.add_argument("--backoff-max", type=float)
    p.add_argument("--crash-loop-restarts", type=int)
    p.add_argument("--crash-loop-window", type=float)
    p.add_argument("--reset-after", type=float, help="uptime that resets the backoff (60)")
    p.add_argument("--poll-interval", type=float)
    p.add_argument("--discover-timeout", type=float)
    p.add_argument("--launcher-grace", type=float)
    p.add_argument("--reap-grace", type=float,
                   help="how long a dead child's status may lag behind its zombie state (60)")
    p.add_argument("--log-max-bytes", type=int)
    p.add_argument("--daemon-oom-score-adj", type=int, help="the daemon's oom_score_adj (1000)")
    p.add_argument("--supervisor-oom-score-adj", type=int,
                   help="the supervisor's own oom_score_adj, where privilege allows (-900)")
    p.add_argument("--cgroup-root")
    p.add_argument("--proc")
    p.add_argument("--daemonize", action="store_true")
    p.add_argument("--stop", action="store_true", help="stop the running supervisor, if it is one")
    ns = vars(p.parse_args(argv))
    root = os.path.abspath(ns["root"])
    conf_path = ns.pop("config") or os.path.join(root, "rollout", "supervisor.conf.json")
    conf: dict[str, Any] = {}
    text = read_text(conf_path)
    if text:
        try:
            loaded = json.loads(text)
            if isinstance(loaded, dict):
                conf = {k.replace("-", "_"): v for k, v in loaded.items()}
        except ValueError as e:
            sys.stderr.write(f"supervisor: ignoring bad config {conf_path}: {e}\n")
    cfg: dict[str, Any] = dict(DEFAULTS)
    cfg.update({k: v for k, v in conf.items() if k in DEFAULTS})
    cfg.update({k: v for k, v in ns.items() if v is not None and k in DEFAULTS})
    cfg["root"] = root
    cfg["daemonize"] = bool(ns["daemonize"])
    cfg["stop"] = bool(ns["stop"])
    cfg["config_file"] = conf_path if conf else None
    return cfg


def lock(root: str) -> int | None:
    """Single instance per root: an flock held for the supervisor's life (fd not inherited)."""
    os.makedirs(os.path.join(root, "rollout"), exist_ok=True)
    fd = safe_open(os.path.join(root, "rollout", "supervisor.lock"), os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        os.close(fd)
        return None
    return fd


def stop_running(root: str, proc: str, wait: float = 5.0) -> dict[str, Any]:
    """--stop: SIGTERM the supervisor supervisor.pid names, only if it is this root's
    supervisor (pid above 1, the recorded start time, python running this script), then
    wait up to `wait` seconds for it to let go of its lock."""
    record = read_pidfile(os.path.join(root, "rollout", "supervisor.pid"))
    if record is None:
        return {"status": "none", "message": "no supervisor.pid: nothing to stop"}
    pid, starttime, _ = record
    distrust = distrust_supervisor(proc, root, pid, starttime)
    if distrust:
        return {"status": "untrusted", "named_pid": pid,
                "message": f"supervisor.pid not trusted, nothing signalled: {distrust}"}
    os.kill(pid, signal.SIGTERM)
    end = time.monotonic() + wait
    fd = lock(root)
    while fd is None and time.monotonic() < end:
        time.sleep(0.05)
        fd = lock(root)
    if fd is None:
        return {"status": "still-running", "pid": pid}
    os.close(fd)
    return {"status": "stopped", "pid": pid}


def running_pid(root: str) -> int | None:
    text = read_text(os.path.join(root, "rollout", "supervisor.pid")) or ""
    try:
        return int(text.split()[0])
    except (ValueError, IndexError):
        return None


def daemonize(root: str) -> bool:
    """Double fork; returns True in the supervisor, False in the original process."""
    first = os.fork()
    if first > 0:
        os.waitpid(first, 0)  # the intermediate child exits at once
        return False
    os.setsid()
    if os.fork() > 0:
        os._exit(0)
    os.chdir("/")
    os.umask(0o022)
    null = os.open(os.devnull, os.O_RDONLY)
    logpath = os.path.join(root, "rollout", "supervisor.log")
    logfd = safe_open(logpath, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    os.dup2(null, 0)
    os.dup2(logfd, 1)
    os.dup2(logfd, 2)
    os.close(null)
    os.close(logfd)
    return True


def main(argv: list[str]) -> int:
    cfg = parse_args(argv)
    root = cfg["root"]
    if cfg["stop"]:
        result = stop_running(root, cfg["proc"])
        print(json.dumps(result))
        return 1 if result["status"] == "still-running" else 0
    fd = lock(root)
    if fd is None:
        pid = running_pid(root)
        print(json.dumps({"status": "already-running", "pid": pid,
                          "message": f"supervisor already running for {root} (pid {pid})"}))
        return 0
    if cfg["daemonize"]:
        pidfile = os.path.join(root, "rollout", "supervisor.pid")
        unlink_quiet(pidfile)
        if not daemonize(root):
            os.close(fd)
            end = time.monotonic() + 5
            while time.monotonic() < end and running_pid(root) is None:
                time.sleep(0.02)
            pid = running_pid(root)
            print(json.dumps({"status": "started" if pid else "unknown", "pid": pid}))
            return 0 if pid else 1
    sup = Supervisor(cfg)

    def on_signal(signum: int, frame: Any) -> None:
        sup.stop_requested = True

    for s in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(s, on_signal)
    return sup.run()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
