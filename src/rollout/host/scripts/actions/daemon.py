"""The daemon: its supervisor, its start, its readiness and ports, its log, and the
supervisor's start-up registration."""

from __future__ import annotations

import os
import sys
import time
from typing import Any

# ruff: noqa: E501
# isort: off
from rollout.host.scripts.common import distrust_supervisor, ownership_problem, ports_owners, proc_stat, proc_state, process_brief, read_pidfile, read_text, safe_append, safe_mkdir, safe_open, safe_remove, safe_write  # inlined on hosts
from rollout.host.scripts.actions.base import POLL, _open_read, _read_at_most, _report, _state_dir, _status_answer  # inlined on hosts
from rollout.host.scripts.actions.spec import action  # inlined on hosts
from rollout.host.scripts.actions.current import current_release  # inlined on hosts
from rollout.host.scripts.actions.hold import release_hold, serving  # inlined on hosts
# isort: on

def _supervisor_alive(root: str, proc: str) -> bool:
    found = read_pidfile(os.path.join(_state_dir(root), "supervisor.pid"))
    if found is None or found[0] <= 1:
        return False
    pid, starttime = found[0], found[1]
    return proc_state(proc, pid, starttime)[0] == "running" \
        and not distrust_supervisor(proc, root, pid, starttime)


def _supervisor_problem(root: str) -> str | None:
    """Why root may not run <root>/rollout/supervisor.py (None: it may): it, the state
    folder and the root (a link to its disk allowed) must be no links, owned by root (or
    the user rollout runs as) and not group- or world-writable."""
    state, script = _state_dir(root), os.path.join(_state_dir(root), "supervisor.py")
    why = (ownership_problem(root, "rollout's root", follow=True)
           or ownership_problem(state, "rollout's state folder")
           or ownership_problem(script, "running the supervisor"))
    return f"refused to run the supervisor: {why}" if why else None


def _start_supervisor(root: str) -> str | None:
    """Start the supervisor (it refuses itself when one runs); why not, else None."""
    import subprocess

    why = _supervisor_problem(root)
    if why:  # root never runs a script others could have written
        return why
    script = os.path.join(_state_dir(root), "supervisor.py")
    p = subprocess.run([sys.executable or "python3", script, "--root", root, "--daemonize"],
                       stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                       stderr=subprocess.PIPE, timeout=60, check=False)
    return None if p.returncode == 0 else (
        f"the supervisor did not start (exit {p.returncode}): "
        f"{p.stderr.decode('utf-8', 'replace')[-300:]}")


@action("root:str restart:bool", "", "refused restarted started")
def run_supervisor(root: str, restart: bool = False) -> dict[str, Any]:
    """Start the supervisor, never one others could have written; restart: the running one
    is told to stop first (it checks what supervisor.pid names before it signals)."""
    import subprocess

    why = _supervisor_problem(root)
    if why:
        return _report("refused", why)
    if restart:
        subprocess.run([sys.executable or "python3", os.path.join(_state_dir(root),
                        "supervisor.py"), "--root", root, "--stop"], stdin=subprocess.DEVNULL,
                       capture_output=True, timeout=120, check=False)
    why = _start_supervisor(root)
    if why:
        return _report("refused", why)
    return _report("restarted" if restart else "started",
                   "supervisor restarted" if restart else "supervisor started")


@action(
    "root:str wait:float proc:str",
    "pid:int starttime:int release:str released:bool pidline:str",
    "no-release refused running started not-started"
)
def start(root: str, wait: float = 60.0, proc: str = "/proc") -> dict[str, Any]:
    """Release the hold and have the supervisor run a daemon of the release current points
    at (starting the supervisor where none runs); wait up to `wait` s for that daemon."""
    release = current_release(root)
    if release is None or not os.path.isdir(os.path.join(root, "releases", release)):
        return _report("no-release", f"{root}/current does not point at a release")
    already = serving(root, release, proc)
    released = release_hold(root)["outcome"] == "released"
    if not _supervisor_alive(root, proc):
        why = _start_supervisor(root)
        if why:
            return _report("refused", why, release=release, released=released)
    end = time.monotonic() + wait
    while True:
        running = serving(root, release, proc)
        if running:
            line = read_text(os.path.join(_state_dir(root), "daemon.pid")) or ""
            word = "running" if already and already[:2] == running[:2] else "started"
            verb = "already runs" if word == "running" else "started by the supervisor:"
            return _report(word, f"daemon {running[0]} {verb} {release}", pid=running[0],
                           starttime=running[1], release=release, released=released,
                           pidline=line.strip())
        if time.monotonic() >= end:
            return _report("not-started", f"the supervisor did not start the daemon of "
                           f"{release} within {wait:g}s", release=release, released=released)
        time.sleep(POLL)


def _accepts(url: str) -> bool:
    """The URL's port takes a TCP connection."""
    import socket
    from urllib.parse import urlsplit

    parts = urlsplit(url)
    try:
        with socket.create_connection((parts.hostname or "127.0.0.1", parts.port or 80), 1):
            return True
    except OSError:
        return False



@action("ports:[int] pid:int? proc:str", "ports:{[obj]} pid:obj?")
def owners(ports: list[int], pid: int | None = None, proc: str = "/proc") -> dict[str, Any]:
    """Who holds the daemon's TCP ports and, for `pid`, that process's age."""
    found = ports_owners(proc, ports)
    out: dict[str, Any] = {"ports": {str(p): found[p] for p in ports}}
    if pid is not None:
        out["pid"] = process_brief(proc, pid) if proc_stat(proc, pid) else None
    return out


def strangers(held: dict[str, list[dict[str, Any]]], pid: int) -> list[int]:
    """The ports (of `owners`' answer, one look) some process other than `pid` or one of
    its children holds, or none holds. Judged by the ancestors seen in that look: a fork of
    the daemon gone since (the lab's pool keeper) was its child when it held the port."""
    return [int(p) for p, found in held.items() if not found or not all(
        o["pid"] == pid or pid in o.get("ancestors", ()) for o in found)]


def _holders(held: dict[str, list[dict[str, Any]]], ports: list[int]) -> str:
    """Who holds these ports, in words: "9821 held by pid 7 (python3 x.py)", "9820 by none"."""
    return "; ".join(
        f"{p} held by " + (", ".join(f"pid {o['pid']} ({o.get('cmdline') or '?'})"
                                     for o in held.get(str(p), [])) or "no process")
        for p in ports)


@action(
    "status_url:str seconds:float grpc_url:str watch:int pidfile:str ports:[int]? pid:int? "
    "require_owner:bool proc:str",
    "pid:int owners:obj answer:str",
    "died timeout stranger ready", warms="http.client"
)
def wait_ready(status_url: str, seconds: float, grpc_url: str = "", watch: int = 0,
               pidfile: str = "", ports: list[int] | None = None, pid: int | None = None,
               require_owner: bool = False, proc: str = "/proc") -> dict[str, Any]:
    """Wait until the gRPC port accepts and then the status port answers (cuzk binds the
    status port first; no status_url: the gRPC port alone); "died" once the daemon (watch,
    else the pid `pidfile` names) is gone. "ready" carries the status answer and the
    ports' owners; require_owner: "stranger" unless the daemon itself holds every port."""
    if not watch and pidfile:
        found = read_pidfile(pidfile)
        watch = found[0] if found and found[0] > 0 else 0
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        if not grpc_url or _accepts(grpc_url):
            answer = _status_answer(status_url) if status_url else ""
            if answer is not None:
                return _ready(status_url, answer, list(ports or []), pid, watch,
                              require_owner, proc)
        if watch and proc_state(proc, watch, None)[0] != "running":
            return _report("died", f"daemon {watch} died during start-up", pid=watch)
        time.sleep(POLL)
    return _report("timeout", f"status port {status_url or grpc_url} did not answer within "
                   f"{seconds:g}s")


def _ready(url: str, answer: str, ports: list[int], pid: int | None, watch: int,
           require_owner: bool, proc: str) -> dict[str, Any]:
    held = owners(ports, pid, proc)
    if require_owner and ports:
        if not watch or proc_state(proc, watch, None)[0] != "running":
            return _report("died", "the daemon is not running", owners=held)
        others = strangers(held["ports"], watch)
        if others:
            return _report("stranger", f"port(s) {others} not held by daemon {watch}: "
                           f"{_holders(held['ports'], others)}", owners=held)
    return _report("ready", f"{url or 'the daemon'} answered; ports {ports} are its own"
                   if require_owner else f"{url} answered", answer=answer, owners=held)


@action("root:str lines:int max_bytes:int", "text:str", "none read", in_agent=True)
def log_tail(root: str, lines: int = 20, max_bytes: int = 65536) -> dict[str, Any]:
    """The last `lines` lines (of at most `max_bytes`) of <root>/rollout/daemon.log."""
    fd = _open_read(os.path.join(_state_dir(root), "daemon.log"))
    if fd is None:
        return _report("none", "no daemon log", text="")
    with os.fdopen(fd, "rb") as f:
        f.seek(max(0, os.fstat(f.fileno()).st_size - max(1, max_bytes)))
        data = f.read(max_bytes)
    kept = data.decode("utf-8", "replace").splitlines()[-max(1, min(lines, 1000)):]
    return _report("read", f"{len(kept)} line(s) of the daemon log",
                   text="".join(f"{line}\n" for line in kept))


# ---------------------------------------------------------------- start-up registration

UNIT = """[Unit]
Description=rollout's supervisor of the cuzk daemon
After=network.target

[Service]
Type=forking
ExecStart={start}

[Install]
WantedBy=multi-user.target
"""


def _start_line(root: str) -> tuple[str, str]:
    """(the command that starts the supervisor at boot, the mark that names its line)."""
    import shlex

    supervisor = os.path.join(_state_dir(root), "supervisor.py")
    start = f"python3 {shlex.quote(supervisor)} --root {shlex.quote(root)} --daemonize"
    return start, f"# rollout-supervisor {root}"


def _register_onstart(path: str, line: str, mark: str) -> str:
    """Append `line` to the on-start script once (made a script where missing); never
    written through a link."""
    if os.path.islink(path):
        raise OSError(f"{path} is a symbolic link: rollout never writes through a link")
    text = (_read_at_most(path, 1 << 20) or b"").decode("utf-8", "replace")
    if mark not in text:
        safe_append(path, ("" if text else "#!/bin/sh\n") + line + "\n", 0o755)
    fd = safe_open(path, os.O_RDONLY)
    try:
        os.fchmod(fd, os.fstat(fd).st_mode | 0o111)
    finally:
        os.close(fd)
    return f"on-start script {path}"


def _register_cron(line: str, mark: str) -> str | None:
    import shutil
    import subprocess

    if not shutil.which("crontab"):
        return None
    now = subprocess.run(["crontab", "-l"], capture_output=True, check=False)
    kept = [x for x in now.stdout.decode("utf-8", "replace").splitlines() if mark not in x]
    table = "".join(f"{x}\n" for x in [*kept, f"@reboot {line}"])
    done = subprocess.run(["crontab", "-"], input=table.encode(), capture_output=True,
                          check=False)
    return "cron @reboot" if done.returncode == 0 else None


def _register_systemd(start: str, unit_path: str) -> str | None:
    import subprocess

    if (read_text("/proc/1/comm") or "").strip() != "systemd":
        return None
    safe_write(unit_path, UNIT.format(start=start).encode(), 0o644)
    for argv in (["systemctl", "daemon-reload"],
                 ["systemctl", "enable", os.path.basename(unit_path)]):
        if subprocess.run(argv, capture_output=True, check=False).returncode != 0:
            return None
    return f"systemd unit {os.path.basename(unit_path)}"


@action("root:str onstart:str unit_path:str", "how:str", "refused registered none")
def register(root: str, onstart: str = "",
             unit_path: str = "/etc/systemd/system/rollout-supervisor.service"
             ) -> dict[str, Any]:
    """Register the supervisor with the host's start-up mechanism, so that a container
    restart brings it back: the on-start script `onstart` names (vast.ai runs it at every
    container start), else an @reboot cron entry, else a systemd unit where systemd is PID
    1. Records the method in <root>/rollout/registered; "none" where there is none."""
    if any(c in root + onstart for c in "\n\r\0"):
        return _report("refused", "a root or on-start path with a line break: refused",
                       how="none")
    start, mark = _start_line(root)
    line = f"{start} {mark}"
    try:
        how = (_register_onstart(onstart, line, mark) if onstart
               else _register_cron(line, mark) or _register_systemd(start, unit_path))
    except OSError as e:
        return _report("refused", f"start-up registration: {e}", how="none")
    safe_mkdir(_state_dir(root))
    safe_write(os.path.join(_state_dir(root), "registered"), f"{how or 'none'}\n".encode(),
               0o644)
    return _report("registered" if how else "none", how or "no start-up mechanism found",
                   how=how or "none")


@action("root:str", "", "removed none", in_agent=True)
def forget_validated(root: str) -> dict[str, Any]:
    """Remove the validation evidence <root>/rollout/validated.json (a failed proof)."""
    if safe_remove(os.path.join(_state_dir(root), "validated.json")):
        return _report("removed", "validation evidence removed")
    return _report("none", "no validation evidence")
