"""Facts about this host, read fresh (facts.py's docstring says how): the `facts` action,
one JSON object that never fails as a whole. Standard library only; python3 >= 3.9."""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import stat
import time
from functools import partial
from typing import Any

# ruff: noqa: E501
# isort: off
from rollout.host.scripts.common import DAEMON_NAMES, Collector, all_pids, cgroup_memory, cgroup_working_set, cuzk_processes, neighbours, ports_owners, distrust_daemon, distrust_supervisor, meminfo, parse_jsonl, proc_ancestors, proc_cmdline, proc_exe, proc_program, proc_start_epoch, proc_stat, read_pidfile, read_text, tail_window  # inlined on hosts
from rollout.host.scripts.actions.spec import action  # inlined on hosts
# isort: on

TAIL_BYTES = 256 * 1024


def process_state(proc: str, pid: int, starttime: int | None, exe: str) -> tuple[str, str | None]:
    """(running|zombie|gone, note). A different start time, or a cmdline without exe: gone."""
    fields = proc_stat(proc, pid)
    if fields is None or len(fields) < 20:
        return "gone", None
    if starttime is None:
        return "gone", "pidfile has no start time"
    if fields[19] != str(starttime):
        return "gone", f"pid {pid} reused (start time {fields[19]}, pidfile {starttime})"
    if fields[0] in ("Z", "X", "x"):
        return "zombie", f"parent PID {fields[1]}"
    if exe and not any(exe in a for a in proc_cmdline(proc, pid)):
        return "gone", f"pid {pid} cmdline does not contain {exe}"
    return "running", None


def cgroup(cgroup_root: str) -> dict[str, Any]:
    """The cgroup's usage and limit, and the working set the drain measures (usage less the
    page cache no live process maps), with the page cache it left out."""
    m = cgroup_memory(cgroup_root)
    memory = {"usage": m["usage"], "limit": m["limit"], "source": m["source"]}
    if m["usage"] is not None and m["source"] is not None:
        ws = cgroup_working_set(cgroup_root, m["source"], m["usage"])
        memory.update(working_set=ws["working_set"], page_cache=ws["page_cache"])
    return {
        "version": {"cgroup-v1": 1, "cgroup-v2": 2}.get(m["source"]),
        "memory": memory,
        "oom": m["oom"],
    }


PARENTS = 8  # a daemon's parent chain, as far as facts report it
SHELLS = ("sh", "bash", "dash", "ash", "zsh", "ksh", "mksh", "busybox")
SCRIPT_BYTES = 64 * 1024


def script_of(proc: str, pid: int, argv: list[str]) -> str:
    """The start of the script a shell runs (`sh /root/entrypoint.sh`: that file), read
    as data: a regular file only, never through a FIFO, at most SCRIPT_BYTES; "" if none."""
    words = [w for w in argv[1:] if not w.startswith("-")]
    if not words or "-c" in argv[1:]:
        return ""
    path = words[0] if words[0].startswith("/") else os.path.join(f"{proc}/{pid}/cwd", words[0])
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY)
    except OSError:
        return ""
    with os.fdopen(fd, "rb") as f:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return ""
        return f.read(SCRIPT_BYTES).decode(errors="replace")


def what_it_is(proc: str, pid: int) -> dict[str, Any]:
    """pid, program, command line, and whether it starts cuzk: a shell, or a launcher (nohup,
    tini, ...), whose command line or script runs the daemon's program (command_runs),
    or another program whose command line names cuzk (what it runs cannot be read); and
    whether it runs the daemon in a loop (an entrypoint.sh)."""
    argv = proc_cmdline(proc, pid)
    program = os.path.basename(proc_program(proc, pid) or (argv[0] if argv else ""))
    shell = program in SHELLS or (bool(argv) and os.path.basename(argv[0]) in SHELLS)
    script = script_of(proc, pid, argv) if shell else ""
    daemon, loop = argv_runs(argv, {})
    in_script = text_runs(script)
    daemon, loop = daemon or in_script[0], loop or in_script[1]
    readable = shell or (bool(argv) and os.path.basename(argv[0]) in LAUNCHERS)
    return {"pid": pid, "program": program[:100], "cmdline": " ".join(argv)[:300],
            "shell": shell,
            "starts_cuzk": daemon if readable else "cuzk" in " ".join(argv[1:]),
            "loops_cuzk": shell and loop and daemon}


# ---------------------------------------------------------------- what a shell runs
# A respawner is found by the daemon's program (DAEMON_NAMES: cuzk-daemon, or cuzk as `make
# cuzk` names it) in the executable position of a command: the word that is run, not one
# that is read (`tail -f cuzk.log`, `grep cuzk`, `pgrep -x cuzk-daemon`) nor another
# program (`cuzk-bench`, a client). Shell text is read as data, never run or expanded.

SEPARATORS = ";&|()\n`"
RESERVED = frozenset(("if", "then", "else", "elif", "fi", "do", "done", "while", "until",
                      "!", "{", "}", "time", "esac"))  # a command follows them
LOOPS = frozenset(("while", "until", "for", "select"))
# programs that run the command in their arguments (their options and values included:
# every word after them that names the daemon counts)
LAUNCHERS = frozenset((
    "exec", "nohup", "setsid", "env", "nice", "ionice", "timeout", "stdbuf", "taskset",
    "chrt", "numactl", "sudo", "doas", "su", "runuser", "setpriv", "command", "builtin",
    "xargs", "flock", "unbuffer", "chpst", "prlimit", "tini", "dumb-init", "gosu", "su-exec",
    "catchsegv", "strace", "ltrace", "valgrind", "watch", "daemonize", "start-stop-daemon",
    "systemd-run", "script", "faketime", "cgexec", "firejail", "unshare", "nsenter", "chroot",
    "s6-setuidgid", "setuidgid", "envdir", "softlimit", "with-contenv", "time"))
REDIRECT = re.compile(r"^[0-9]*(?:<<?<?|>>?|&>>?|>&|<&|<>)(.*)$")
ASSIGNMENT = re.compile(r"^([A-Za-z_][A-Za-z0-9_]*)=(.*)$", re.DOTALL)
VARIABLE = re.compile(r"^\$\{?([A-Za-z_][A-Za-z0-9_]*)(?::?[-=+]([^}]*))?\}?$")
MAX_DEPTH = 4  # sh -c inside sh -c ...: deeper text is not read
MAX_RESOLVED = 64  # words a variable in a command's place is followed through


def shell_commands(text: str) -> list[list[str]]:
    """The words of each simple command of shell text, quotes removed: a new command after
    ; & | ( ) ` and a newline (so the command of a $(...) is one too); comments dropped."""
    commands: list[list[str]] = [[]]
    word: list[str] | None = None  # the word being read; None between words
    quote, i, n = "", 0, len(text)
    while i < n:
        c = text[i]
        if c in " \t\r" + SEPARATORS and not quote:
            if word is not None:
                commands[-1].append("".join(word))
                word = None
            if c in SEPARATORS:
                commands.append([])
        elif c == "#" and word is None and not quote:
            while i < n and text[i] != "\n":
                i += 1
            continue
        else:
            word = [] if word is None else word
            if c == quote:
                quote = ""
            elif c in "'\"" and not quote:
                quote = c
            elif c == "\\" and quote != "'" and i + 1 < n:
                i += 1
                word.append(text[i] if text[i] != "\n" else "")
            else:
                word.append(c)
        i += 1
    if word is not None:
        commands[-1].append("".join(word))
    return [c for c in commands if c]


def assignments(commands: list[list[str]]) -> dict[str, list[str]]:
    """Every NAME=VALUE word of the text (a variable that may hold the daemon's path)."""
    out: dict[str, list[str]] = {}
    for words in commands:
        for w in words:
            m = ASSIGNMENT.match(w)
            if m:
                out.setdefault(m.group(1), []).append(m.group(2))
    return out


def names_daemon(word: str, assigned: dict[str, list[str]]) -> bool:
    """The word, run, is the daemon's program: its last path part is one of DAEMON_NAMES,
    or a variable the text sets to such a path (${X:-default}'s default too), followed
    through at most MAX_RESOLVED words."""
    todo = [word]
    seen: set[str] = set()
    while todo and len(seen) < MAX_RESOLVED:
        w = todo.pop()
        if w in seen:
            continue
        seen.add(w)
        base = w.rstrip("/").rsplit("/", 1)[-1]
        if base in DAEMON_NAMES:
            return True
        m = VARIABLE.match(w) or VARIABLE.match(base)
        if m is not None:
            todo += assigned.get(m.group(1), [])[-16:] + ([m.group(2)] if m.group(2) else [])
    return False


def _plain(words: list[str]) -> list[str]:
    """The words less redirections (`> log`, `2>&1`, `<in`) and their targets."""
    out: list[str] = []
    skip = False
    for w in words:
        m = REDIRECT.match(w)
        if skip:
            skip = False
        elif m is not None:
            skip = m.group(1) == ""  # `> log`: its target is the next word
        else:
            out.append(w)
    return out


def command_runs(words: list[str], assigned: dict[str, list[str]],
                 depth: int = 0) -> tuple[bool, bool]:
    """(runs the daemon, is or starts a loop) for one simple command: its leading reserved
    words and assignments skipped, then the word that is run; a launcher's or a shell's
    words after it are run too (a word with spaces or ; in it read as shell text: sh -c)."""
    words, loop, i = _plain(words), False, 0
    while i < len(words) and (words[i] in RESERVED or ASSIGNMENT.match(words[i])):
        loop = loop or words[i] in ("while", "until")
        i += 1
    if i < len(words) and words[i] == "function":
        return False, loop
    if i >= len(words):
        return False, loop
    program = words[i].rsplit("/", 1)[-1]
    loop = loop or program in LOOPS
    if names_daemon(words[i], assigned):
        return True, loop
    if program not in LAUNCHERS and program not in SHELLS:
        return False, loop
    for w in words[i + 1:]:
        if any(c in w for c in " \t\n;&|"):
            inner = text_runs(w, depth + 1, assigned)
            loop = loop or inner[1]
            if inner[0]:
                return True, loop
        elif names_daemon(w, assigned):
            return True, loop
    return False, loop


def text_runs(text: str, depth: int = 0,
              outer: dict[str, list[str]] | None = None) -> tuple[bool, bool]:
    """(runs the daemon's program, has a loop) for shell text: a script, or sh -c's."""
    if not text or depth > MAX_DEPTH:
        return False, False
    commands = shell_commands(text[:SCRIPT_BYTES])
    assigned = {**(outer or {}), **assignments(commands)}
    daemon = loop = False
    for words in commands:
        d, lp = command_runs(words, assigned, depth)
        daemon, loop = daemon or d, loop or lp
    return daemon, loop


def argv_runs(argv: list[str], assigned: dict[str, list[str]]) -> tuple[bool, bool]:
    """What a process's own command line runs: its argv read as one command (a shell's -c
    text, a launcher's command)."""
    return command_runs(list(argv), assigned) if argv else (False, False)


def runs_cuzk_in_a_loop(text: str) -> bool:
    """A shell's script or -c text that loops and runs the daemon's program as a command
    (an entrypoint's `while true; do .../cuzk-daemon ...; sleep 10; done`); not one that
    only names it (`stat .../cuzk-daemon`, `tail cuzk.log`, `while pgrep -x cuzk-daemon`)
    nor one that runs another program (`while true; do cuzk-bench status; sleep 5; done`)."""
    daemon, loop = text_runs(text)
    return daemon and loop


def parent_chain(proc: str, ancestors: list[int]) -> list[dict[str, Any]]:
    """Each ancestor of a daemon, nearest first, and what it is (for preflight to judge: a
    shell loop, an entrypoint, an init that only reaps)."""
    return [what_it_is(proc, pid) for pid in ancestors[:PARENTS]]


def cuzk_loops(proc: str, skip: set[int], supervisor: int | None = None
               ) -> list[dict[str, Any]]:
    """Shells whose command line or script runs cuzk in a loop, daemon or not running now (a loop
    between two restarts): whatever their delay, they would start it again. Not one the
    trusted supervisor runs (a launcher), nor one of an SSH session."""
    out: list[dict[str, Any]] = []
    for pid in all_pids(proc):
        argv = proc_cmdline(proc, pid)
        if pid in skip or not argv or os.path.basename(argv[0]) not in SHELLS:
            continue
        found = what_it_is(proc, pid)
        if (found["loops_cuzk"] and supervisor not in proc_ancestors(proc, pid)
                and not in_ssh_session(proc, pid)):
            out.append(found)
    return out[:PARENTS]


SSH_SERVERS = ("sshd", "sshd-session", "dropbear")


def in_ssh_session(proc: str, pid: int) -> bool:
    """A command of a live SSH session (rollout's own, or someone's at a prompt): not a loop
    the container runs (a loop started with setsid nohup is init's child, not sshd's)."""
    return any(os.path.basename(proc_exe(proc, a) or "") in SSH_SERVERS
               for a in proc_ancestors(proc, pid) if a > 1)


def memory_summary(proc: str) -> dict[str, Any]:
    vals = meminfo(proc)
    return {"total": vals.get("MemTotal"), "available": vals.get("MemAvailable")}


def tail_lines(path: str, max_bytes: int = TAIL_BYTES) -> tuple[list[str], bool]:
    """The last complete lines within max_bytes of the end; True when that is the whole file."""
    data, start, _ = tail_window(path, max_bytes)
    lines = data.decode(errors="replace").splitlines()
    return [ln for ln in lines if ln.strip()], start == 0


def restarts_total(path: str) -> int:
    """Exits rollout did not ask for (no hold set; each one a restart by the supervisor)
    since exits.jsonl began: one pass over the whole records, none parsed (the supervisor
    writes `"held": true` for the others); a torn or foreign line is not one."""
    with open(path, "rb") as f:
        return sum(1 for line in f if line.startswith(b"{") and line.rstrip().endswith(b"}")
                   and b'"held": true' not in line)


def records(lines: list[str]) -> list[dict[str, Any]]:
    return [r for r in parse_jsonl(lines) if isinstance(r, dict)]


def sha256_of(path: str) -> str | None:
    """The file's sha256, or None when it is missing or not a regular file."""
    if not os.path.isfile(path):
        return None
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
        uncache(f.fileno())
    return digest.hexdigest()


def uncache(fd: int) -> None:
    """Drop the file's clean pages from the page cache (pages a process maps stay). Read
    again by the next check, a release's pages would turn active and count in the working
    set a drain waits on: a 100 MiB redeploy then failed its drain."""
    advise = getattr(os, "posix_fadvise", None)
    if advise is not None:
        with contextlib.suppress(OSError):
            advise(fd, 0, 0, os.POSIX_FADV_DONTNEED)


class FactsArgs:
    """What the facts read: the root, the files to digest, the daemon's TCP ports, and
    where /proc and the cgroup tree are (facts.py's arguments, as parse_args names them)."""

    def __init__(self, root: str = "/data", digest: list[str] | None = None,
                 port: list[int] | None = None, proc: str = "/proc",
                 cgroup_root: str = "/sys/fs/cgroup") -> None:
        self.root, self.digest, self.port = root, digest, port
        self.proc, self.cgroup_root = proc, cgroup_root


class Facts(Collector):
    def __init__(self, args: FactsArgs) -> None:
        super().__init__()
        self.root: str = args.root
        self.digest_paths: list[str] = args.digest or []
        self.ports: list[int] = args.port or []
        self.dir = os.path.join(args.root, "rollout")
        self.proc: str = args.proc
        self.cgroup_root: str = args.cgroup_root
        self.now = time.time()

    def daemon(self) -> dict[str, Any]:
        pf = read_pidfile(os.path.join(self.dir, "daemon.pid"))
        if pf is None:
            return {"pid": None, "starttime": None, "exe": None, "state": "none",
                    "note": None, "started_at": None, "uptime_secs": None}
        pid, starttime, exe = pf
        state, note = process_state(self.proc, pid, starttime, exe)
        distrust = distrust_daemon(self.proc, self.root, pid, starttime, exe)
        if state == "running" and distrust:  # not our daemon, whatever the pidfile says
            state, note = "gone", f"daemon.pid not trusted: {distrust}"
        started = proc_start_epoch(self.proc, starttime)
        return {
            "pid": pid,
            "starttime": starttime,
            "exe": exe or None,
            "state": state,
            "note": note,
            "started_at": started if state == "running" else None,
            "uptime_secs": round(self.now - started, 1) if started and state == "running" else None,
        }

    def supervisor(self) -> dict[str, Any]:
        pf = read_pidfile(os.path.join(self.dir, "supervisor.pid"))
        alive = False
        pid = None
        if pf is not None:
            pid = pf[0]
            alive = process_state(self.proc, pid, pf[1], "")[0] == "running" and not (
                distrust_supervisor(self.proc, self.root, pid, pf[1]))
        doc: Any = None
        text = read_text(os.path.join(self.dir, "supervisor.json"))
        if text:
            with contextlib.suppress(ValueError):
                doc = json.loads(text)
        if not isinstance(doc, dict):
            doc = None
        return {
            "pid": pid,
            "alive": alive,
            "state": doc.get("state") if doc else None,
            "since": doc.get("since") if doc else None,
            "updated": doc.get("updated") if doc else None,
            "status": doc,
        }

    def processes(self, supervisor_pid: int | None) -> list[dict[str, Any]]:
        """Every cuzk daemon on the host, whatever its parent (supervised: ours), with its
        parent chain."""
        found = cuzk_processes(self.proc, supervisor_pid)
        for p in found:
            p["parents"] = parent_chain(self.proc, p.get("ancestors") or [])
        return found

    def loops(self, supervisor_pid: int | None) -> list[dict[str, Any]]:
        """Shells that start cuzk (not this script's own session, not the supervisor's)."""
        mine = {os.getpid(), *proc_ancestors(self.proc, os.getpid())}
        return cuzk_loops(self.proc, mine, supervisor_pid)

    def neighbours(self, daemons: list[dict[str, Any]]) -> dict[str, Any]:
        """Memory the container's other processes hold (not the daemons nor their children):
        measured before any stop, for the budget rule."""
        source = cgroup_memory(self.cgroup_root)["source"]
        return neighbours(self.cgroup_root, source, self.proc, [p["pid"] for p in daemons])

    def port_owners(self, supervisor_pid: int | None) -> dict[str, list[dict[str, Any]]]:
        """Who holds each of the daemon's TCP ports (--port): pid, command line, uptime."""
        out: dict[str, list[dict[str, Any]]] = {}
        for port, owners in ports_owners(self.proc, self.ports).items():
            for o in owners:
                o["supervised"] = supervisor_pid is not None and supervisor_pid in o["ancestors"]
            out[str(port)] = owners
        return out

    def current(self) -> str | None:
        """The release `current` points at; a link that leads outside releases/ is none
        (an error says where it leads): never taken for a release, nor recorded as one."""
        path = os.path.join(self.root, "current")
        try:
            name = os.path.basename(os.readlink(path).rstrip("/"))
        except FileNotFoundError:
            return None
        releases = os.path.realpath(os.path.join(self.root, "releases"))
        if os.path.dirname(os.path.realpath(path)) != releases:
            raise ValueError(f"{path} points outside {releases}: not a release")
        return name

    def previous(self) -> str | None:
        """The release current pointed at before the last switch (written by the switch)."""
        text = read_text(os.path.join(self.dir, "previous_release"))
        return text.strip() or None if text else None

    def digests(self) -> dict[str, str | None]:
        return {path: self.safe(f"digest {path}", partial(sha256_of, path))
                for path in self.digest_paths}

    def validated(self) -> Any:
        """The evidence the controller's validate step left: which daemon (pid, starttime)
        passed the validation of which release. Bounded; the controller parses it."""
        try:
            with open(os.path.join(self.dir, "validated.json"), "rb") as f:
                raw = f.read(4096)
        except OSError:
            return None
        try:
            return json.loads(raw)
        except ValueError:
            return None

    def host_id(self) -> str | None:
        """This machine's id (<root>/rollout/host-id, made by the lock script at first
        contact): read, never made, never through a link. The controller checks its form."""
        path = os.path.join(self.dir, "host-id")
        try:
            fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
        except FileNotFoundError:
            return None
        with os.fdopen(fd, "rb") as f:
            return f.read(64).strip().decode("ascii", "replace")

    def releases(self) -> list[dict[str, Any]]:
        base = os.path.join(self.root, "releases")
        if not os.path.isdir(base):
            return []
        out: list[dict[str, Any]] = []
        for name in sorted(os.listdir(base)):
            path = os.path.join(base, name)
            if os.path.isdir(path):
                exe = os.path.join(path, "cuzk-daemon")
                out.append({
                    "id": name,
                    "mtime": os.path.getmtime(path),
                    "has_daemon": os.path.isfile(exe),
                    "has_bench": os.path.isfile(os.path.join(path, "cuzk-bench")),
                })
        out.sort(key=lambda r: float(r["mtime"]))
        return out

    def disk(self) -> dict[str, Any]:
        st = os.statvfs(self.root)
        return {"free_bytes": st.f_bavail * st.f_frsize, "total_bytes": st.f_blocks * st.f_frsize}

    def writable(self) -> bool:
        """access(2) also reports a read-only mount (EROFS); facts never write to find out."""
        return os.path.isdir(self.root) and os.access(self.root, os.W_OK | os.X_OK)

    def exits(self) -> dict[str, Any]:
        path = os.path.join(self.dir, "exits.jsonl")
        if not os.path.exists(path):
            return {"last_exit": None, "restarts_last_hour": 0, "exits_last_hour": 0,
                    "count_complete": True, "restarts_total": 0}
        lines, whole = tail_lines(path)
        recs = records(lines)
        hour = [r for r in recs if isinstance(r.get("time"), (int, float))
                and r["time"] >= self.now - 3600]
        oldest_in_hour = bool(recs) and len(hour) == len(recs)
        return {
            "last_exit": recs[-1] if recs else None,
            "restarts_last_hour": sum(1 for r in hour if not r.get("held")),
            "exits_last_hour": len(hour),
            # the bounded read may not reach back an hour: then the counts are lower bounds
            "count_complete": whole or not oldest_in_hour,
            "restarts_total": restarts_total(path),
        }

    def last_start(self) -> Any:
        path = os.path.join(self.dir, "starts.jsonl")
        if not os.path.exists(path):
            return None
        recs = records(tail_lines(path, 64 * 1024)[0])
        return recs[-1] if recs else None

    def cordoned(self) -> str | None:
        """The run whose cordon is not undone yet (<root>/rollout/cordoned.json), or None."""
        text = read_text(os.path.join(self.dir, "cordoned.json"))
        if text is None:
            return None
        try:
            doc = json.loads(text)
        except ValueError:
            return "?"
        run = doc.get("run") if isinstance(doc, dict) else None
        return run[:128] if isinstance(run, str) else "?"

    def collect(self) -> dict[str, Any]:
        import platform  # here: every other call of ops would pay for it
        import socket

        out: dict[str, Any] = {"time": self.now, "root": self.root}
        out["hostname"] = self.safe("hostname", socket.gethostname)
        out["python"] = self.safe("python", platform.python_version)
        out["cgroup"] = self.safe("cgroup", lambda: cgroup(self.cgroup_root))
        out["meminfo"] = self.safe("meminfo", lambda: memory_summary(self.proc))
        out["daemon"] = self.safe("daemon", self.daemon)
        out["supervisor"] = self.safe("supervisor", self.supervisor)
        sup = out["supervisor"] or {}
        sup_pid = sup.get("pid") if sup.get("alive") else None
        out["cuzk_processes"] = self.safe("cuzk_processes", lambda: self.processes(sup_pid))
        out["port_owners"] = self.safe("port_owners", lambda: self.port_owners(sup_pid))
        out["cuzk_loops"] = self.safe("cuzk_loops", lambda: self.loops(sup_pid))
        out["neighbours"] = self.safe("neighbours", lambda: self.neighbours(
            out["cuzk_processes"] or []))
        out["registered"] = self.safe("registered", lambda: (read_text(
            os.path.join(self.dir, "registered")) or "").strip()[:200] or None)
        out["held"] = self.safe("held", lambda: os.path.exists(os.path.join(self.dir, "hold")))
        out["cordoned"] = self.safe("cordoned", self.cordoned)
        out["current_release"] = self.safe("current_release", self.current)
        out["previous_release"] = self.safe("previous_release", self.previous)
        out["digests"] = self.digests()
        out["validated"] = self.safe("validated", self.validated)
        out["releases"] = self.safe("releases", self.releases)
        out["host_id"] = self.safe("host_id", self.host_id)
        out["disk"] = self.safe("disk", self.disk)
        out["root_writable"] = self.safe("root_writable", self.writable)
        ex = self.safe("exits", self.exits) or {}
        out["last_exit"] = ex.get("last_exit")
        out["restarts_last_hour"] = ex.get("restarts_last_hour")
        out["exits_last_hour"] = ex.get("exits_last_hour")
        out["exit_counts_complete"] = ex.get("count_complete")
        out["restarts_total"] = ex.get("restarts_total")
        out["last_start"] = self.safe("last_start", self.last_start)
        out["errors"] = self.errors
        return out


def collect(where: FactsArgs) -> dict[str, Any]:
    """The facts, or (a bug) one error in their place: still one JSON object."""
    try:
        return Facts(where).collect()
    except Exception as e:  # noqa: BLE001 - last resort: still one JSON object
        return {"time": time.time(), "root": where.root,
                "errors": {"facts": f"{type(e).__name__}: {e}"}, "digests": {}}


@action("root:str digests:[str]? ports:[int]? proc:str cgroup_root:str",
        "time:float root:str hostname:str? python:str? cgroup:obj? meminfo:obj? daemon:obj? supervisor:obj? cuzk_processes:list? port_owners:obj? cuzk_loops:list? neighbours:obj? registered:str? held:bool? cordoned:str? current_release:str? previous_release:str? digests:obj validated:any releases:list? host_id:str? disk:obj? root_writable:bool? last_exit:obj? restarts_last_hour:int? exits_last_hour:int? exit_counts_complete:bool? restarts_total:int? last_start:any errors:obj",
        "read")
def facts(root: str, digests: list[str] | None = None, ports: list[int] | None = None,
          proc: str = "/proc", cgroup_root: str = "/sys/fs/cgroup") -> dict[str, Any]:
    """This host's facts (daemon, supervisor, memory, releases, exits, ...), each piece
    null where it cannot be read (its error under "errors"); `digests`: files whose sha256
    to report; `ports`: TCP ports whose holders to report."""
    out = collect(FactsArgs(root, digests, ports, proc, cgroup_root))
    return {"outcome": "read", "reason": "host facts", **out}
