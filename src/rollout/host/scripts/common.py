"""Helpers shared by the host scripts: /proc, cgroup and file readers. Never raise on bad input.

Not sent on its own: script_text() puts this source in front of each script (whose
``from rollout.host.scripts.common import ...  # inlined on hosts`` line it drops), so what runs
on a host is still one standard-library-only file. Runs on python3 >= 3.9.
Names defined here must not be redefined by a script: the inlined copy would be replaced.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import stat
from collections.abc import Callable, Iterable
from typing import Any

HUGE_LIMIT = 1 << 60  # a cgroup v1 "no limit" is a page-rounded 2**63 - 1


def read_text(path: str) -> str | None:
    try:
        with open(path) as f:
            return f.read()
    except (OSError, UnicodeDecodeError):
        return None


# ---------------------------------------------------------------- writes that never follow a link
# Every file rollout writes or removes on a host goes through these: its folder is opened with
# O_DIRECTORY|O_NOFOLLOW, the file itself with O_NOFOLLOW (a temporary with O_EXCL too), so a
# symbolic link planted in place of either is refused, never written through.


class UnsafePath(OSError):
    """A path rollout writes is a symbolic link, or not what it should be: refused."""


def _folder_fd(path: str) -> tuple[int, str]:
    """(fd of the folder of `path`, opened without following a link there; the file's name)."""
    folder, name = os.path.split(path.rstrip("/") or "/")
    if not name or name in (".", ".."):
        raise UnsafePath(f"{path!r} names no file")
    try:
        return os.open(folder or ".", os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW), name
    except OSError as e:
        if os.path.islink(folder):
            raise UnsafePath(f"{folder} is a symbolic link (to {_link_text(folder)}): "
                             "rollout never writes through a link") from e
        raise


def _link_text(path: str, dir_fd: int | None = None) -> str:
    try:
        return repr(os.readlink(path, dir_fd=dir_fd)[:200])
    except OSError:
        return "?"


def _refuse_link(folder_fd: int, name: str, path: str, kinds: tuple[int, ...]) -> bool:
    """True when `name` exists (a kind in `kinds`); UnsafePath when it is a link or another
    kind of file."""
    try:
        st = os.lstat(name, dir_fd=folder_fd)
    except FileNotFoundError:
        return False
    if stat.S_ISLNK(st.st_mode):
        raise UnsafePath(f"{path} is a symbolic link (to {_link_text(name, folder_fd)}): "
                         "rollout never writes through a link")
    if stat.S_IFMT(st.st_mode) not in kinds:
        raise UnsafePath(f"{path} is not a regular file: refused")
    return True


def safe_write(path: str, data: bytes, mode: int = 0o600) -> None:
    """Replace `path` whole: a temporary `path`.new created with O_EXCL|O_NOFOLLOW (a stale
    regular one is removed first; a link there is refused), fsynced, renamed over `path`
    (refused when `path` is a link)."""
    fd_dir, name = _folder_fd(path)
    try:
        _refuse_link(fd_dir, name, path, (stat.S_IFREG,))
        tmp = f"{name}.new"
        if _refuse_link(fd_dir, tmp, f"{path}.new", (stat.S_IFREG,)):
            os.unlink(tmp, dir_fd=fd_dir)
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW
        fd = os.open(tmp, flags, mode, dir_fd=fd_dir)
        try:
            os.fchmod(fd, mode)
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view):]
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, name, src_dir_fd=fd_dir, dst_dir_fd=fd_dir)
        os.fsync(fd_dir)
    finally:
        os.close(fd_dir)


def safe_open(path: str, flags: int, mode: int = 0o600) -> int:
    """An fd on `path` (created with `mode` when O_CREAT is in flags), never through a link:
    for appends (O_APPEND) and for lock files (flock)."""
    fd_dir, name = _folder_fd(path)
    try:
        _refuse_link(fd_dir, name, path, (stat.S_IFREG,))
        try:
            return os.open(name, flags | os.O_NOFOLLOW | os.O_NONBLOCK, mode, dir_fd=fd_dir)
        except OSError:
            _refuse_link(fd_dir, name, path, (stat.S_IFREG,))  # planted since the look above
            raise
    finally:
        os.close(fd_dir)


def safe_append(path: str, text: str, mode: int = 0o600) -> None:
    """Append `text` to `path` (created with `mode`), never through a link."""
    fd = safe_open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, mode)
    with os.fdopen(fd, "a") as f:
        f.write(text)


def safe_remove(path: str) -> bool:
    """Remove the file `path` (a link there: the link itself, never its target); True when
    there was one. A missing folder holds nothing to remove."""
    try:
        fd_dir, name = _folder_fd(path)
    except FileNotFoundError:
        return False
    try:
        os.unlink(name, dir_fd=fd_dir)
        return True
    except FileNotFoundError:
        return False
    finally:
        os.close(fd_dir)


def safe_mkdir(path: str, mode: int = 0o755) -> None:
    """Make the folder `path` (and its missing parents) where it is missing; a link in place
    of it is refused."""
    parent = os.path.dirname(path.rstrip("/"))
    if parent and parent != path and not os.path.lexists(parent):
        safe_mkdir(parent)
    fd_dir, name = _folder_fd(path)
    try:
        with contextlib.suppress(FileExistsError):
            os.mkdir(name, mode, dir_fd=fd_dir)
        _refuse_link(fd_dir, name, path, (stat.S_IFDIR,))
    finally:
        os.close(fd_dir)


def trusted_owner(st: os.stat_result) -> bool:
    """Owned by root, or by the user rollout runs as (a host reached without root)."""
    return st.st_uid in (0, os.geteuid())


def ownership_problem(path: str, what: str, follow: bool = False) -> str | None:
    """Why root must not act on `path`: not owned by root (or by rollout's user), group- or
    world-writable, or a link where none belongs; None when it is fine or missing."""
    try:
        st = os.stat(path) if follow else os.lstat(path)
    except FileNotFoundError:
        return None
    except OSError as e:
        return f"{path} cannot be examined: {e.strerror}"
    if stat.S_ISLNK(st.st_mode):
        return f"{path} is a symbolic link (to {_link_text(path)}): {what} must not be a link"
    if not trusted_owner(st):
        return f"{path} is owned by uid {st.st_uid}, not by root: {what} refused"
    if st.st_mode & 0o022:
        return (f"{path} is group- or world-writable (mode {stat.S_IMODE(st.st_mode):04o}): "
                f"{what} refused")
    return None


def read_int(path: str) -> int | None:
    """The integer in a file; None when unreadable, not a number, or "max" (no limit)."""
    text = read_text(path)
    if text is None:
        return None
    try:
        return int(text.strip())
    except ValueError:
        return None


def read_kv(path: str) -> dict[str, int] | None:
    """"name value" lines (memory.events, oom_control) as a dict; None when unreadable."""
    text = read_text(path)
    if text is None:
        return None
    out: dict[str, int] = {}
    for line in text.splitlines():
        parts = line.split()
        if len(parts) == 2:
            with contextlib.suppress(ValueError):
                out[parts[0]] = int(parts[1])
    return out


def read_pidfile(path: str) -> tuple[int, int | None, str] | None:
    """A "PID STARTTIME EXE" file as (pid, start time or None, exe or ""); None without a pid."""
    text = read_text(path)
    if not text:
        return None
    parts = text.split()
    try:
        pid = int(parts[0])
    except (ValueError, IndexError):
        return None
    starttime: int | None = None
    if len(parts) > 1:
        with contextlib.suppress(ValueError):
            starttime = int(parts[1])
    return pid, starttime, " ".join(parts[2:])


def proc_stat(proc: str, pid: int) -> list[str] | None:
    """Fields of /proc/PID/stat from field 3 (state) on; None when the pid is gone."""
    text = read_text(f"{proc}/{pid}/stat")
    if not text or ")" not in text:
        return None
    return text[text.rfind(")") + 2 :].split()


def proc_starttime(proc: str, pid: int) -> int | None:
    """Field 22 of /proc/PID/stat: the start time in clock ticks since boot."""
    fields = proc_stat(proc, pid)
    if fields is None or len(fields) < 20:
        return None
    try:
        return int(fields[19])
    except ValueError:
        return None


def proc_cmdline(proc: str, pid: int) -> list[str]:
    try:
        with open(f"{proc}/{pid}/cmdline", "rb") as f:
            return [a for a in f.read().decode(errors="replace").split("\0") if a]
    except OSError:
        return []


def proc_exe(proc: str, pid: int) -> str | None:
    """The real path of a process's executable (a deleted one's too); None when unreadable."""
    try:
        path = os.readlink(f"{proc}/{pid}/exe")
    except OSError:
        return None
    if path.endswith(" (deleted)"):
        path = path[: -len(" (deleted)")]
    return os.path.realpath(path)


def proc_program(proc: str, pid: int) -> str | None:
    """What a process runs: its executable or, when that is a Python interpreter, the script
    it was started with (a shebang script: the lab's stand-in daemon, the supervisor)."""
    exe = proc_exe(proc, pid)
    if exe is None or not os.path.basename(exe).startswith("python"):
        return exe
    argv = proc_cmdline(proc, pid)
    script = argv[1] if len(argv) > 1 else ""
    return os.path.realpath(script) if script.startswith("/") else None


def _is_under(path: str, folder: str) -> bool:
    return path.startswith(os.path.realpath(folder).rstrip("/") + "/")


def distrust_pid(proc: str, pid: int, starttime: int | None, program_ok: Callable[[str], bool],
                 what: str) -> str | None:
    """Why a pid read from a pidfile must not be acted on; None when it may be: a pid above
    1, running the start time the pidfile recorded, and a program that program_ok accepts."""
    if pid <= 1:
        return f"pid {pid} is never {what}"
    if starttime is None:
        return f"the pidfile gives pid {pid} no start time to confirm it by"
    found = proc_starttime(proc, pid)
    if found != starttime:
        return f"pid {pid} started at {found}, not at {starttime} as recorded: another process"
    program = proc_program(proc, pid)
    if program is None or not program_ok(program):
        return f"pid {pid} runs {program or 'an unknown program'}, not {what}"
    return None


def supervisor_record(root: str) -> dict[str, Any]:
    """<root>/rollout/supervisor.json: the supervisor's own record of the daemon it started
    (or adopted), rewritten from its memory at every heartbeat; {} when unreadable. Read
    bounded, never through a link."""
    try:
        with os.fdopen(safe_open(os.path.join(root, "rollout", "supervisor.json"),
                                 os.O_RDONLY), "rb") as f:
            doc = json.loads(f.read(1 << 16))
    except (OSError, ValueError):
        return {}
    return doc if isinstance(doc, dict) else {}


def _unrecorded(record: dict[str, Any], pid: int, starttime: int | None,
                program: str | None) -> str | None:
    """Why the supervisor's record does not name this process; None when it does: its pid,
    its start time and its executable (an older supervisor's record has its pid alone)."""
    named = record.get("daemon_pid")
    if isinstance(named, bool) or named != pid:
        return (f"the supervisor's record (supervisor.json) names daemon pid "
                f"{str(named)[:20]}, not {pid}: a process the supervisor did not start")
    if "daemon_starttime" in record and record["daemon_starttime"] != starttime:
        return (f"the supervisor's record gives pid {pid} the start time "
                f"{str(record['daemon_starttime'])[:20]}, not {starttime}: another process")
    recorded_exe = record.get("daemon_exe")
    if "daemon_exe" in record and (not isinstance(recorded_exe, str)
                                   or os.path.realpath(recorded_exe) != program):
        return f"the supervisor's record gives pid {pid} another executable"
    return None


def distrust_daemon(proc: str, root: str, pid: int, starttime: int | None,
                    exe: str) -> str | None:
    """None when the pid is the daemon the supervisor started, by rule: the pid and its start
    time (/proc/PID/stat field 22) and its executable (under <root>/releases) are those
    daemon.pid names AND those of the supervisor's own record (supervisor.json). Living
    under <root>/releases is never enough: a copy run by hand, or any process whose pid
    was written to daemon.pid, is not the daemon."""
    releases = os.path.join(root, "releases")
    want = os.path.realpath(exe) if exe else None

    def ours(program: str) -> bool:
        return _is_under(program, releases) and want == program

    what = f"a daemon under {releases}" + (f" running {want}" if want else
                                           ", as daemon.pid names no executable")
    distrust = distrust_pid(proc, pid, starttime, ours, what)
    return distrust or _unrecorded(supervisor_record(root), pid, starttime, want)


def distrust_supervisor(proc: str, root: str, pid: int, starttime: int | None) -> str | None:
    """None when the pid is this root's supervisor: python3 running <root>/rollout/supervisor.py."""
    script = os.path.realpath(os.path.join(root, "rollout", "supervisor.py"))
    return distrust_pid(proc, pid, starttime, lambda program: program == script,
                        f"the supervisor {script}")


def proc_state(proc: str, pid: int, starttime: int | None) -> tuple[str, int | None]:
    """(running|zombie|gone, parent pid). Another start time means a reused pid: gone."""
    fields = proc_stat(proc, pid)
    if fields is None or len(fields) < 20:
        return "gone", None
    if starttime is not None and fields[19] != str(starttime):
        return "gone", None
    try:
        ppid: int | None = int(fields[1])
    except ValueError:
        ppid = None
    if fields[0] in ("Z", "X", "x"):
        return "zombie", ppid
    return "running", ppid


def proc_start_epoch(proc: str, starttime: int | None) -> float | None:
    """Wall-clock start of a process from its start time (clock ticks since boot)."""
    if starttime is None:
        return None
    for line in (read_text(f"{proc}/stat") or "").splitlines():
        if line.startswith("btime "):
            try:
                return int(line.split()[1]) + starttime / os.sysconf("SC_CLK_TCK")
            except (ValueError, OSError):
                return None
    return None


def cgroup_memory(cgroup_root: str) -> dict[str, Any]:
    """The container's memory from its cgroup (v1 or v2): source, usage, limit, oom.

    limit is None when there is none ("max", or a v1 limit of about 2**63); oom holds the
    OOM counters (None without a cgroup).
    """
    v1 = os.path.join(cgroup_root, "memory")
    if os.path.exists(os.path.join(v1, "memory.usage_in_bytes")):
        limit = read_int(os.path.join(v1, "memory.limit_in_bytes"))
        oom_control = read_kv(os.path.join(v1, "memory.oom_control")) or {}
        return {
            "source": "cgroup-v1",
            "usage": read_int(os.path.join(v1, "memory.usage_in_bytes")),
            "limit": limit if limit is None or limit < HUGE_LIMIT else None,
            "oom": {
                "failcnt": read_int(os.path.join(v1, "memory.failcnt")),
                "oom_kill": oom_control.get("oom_kill"),
                "under_oom": oom_control.get("under_oom"),
            },
        }
    if os.path.exists(os.path.join(cgroup_root, "memory.current")) or os.path.exists(
        os.path.join(cgroup_root, "cgroup.controllers")
    ):
        events = read_kv(os.path.join(cgroup_root, "memory.events")) or {}
        limit = read_int(os.path.join(cgroup_root, "memory.max"))
        return {
            "source": "cgroup-v2",
            "usage": read_int(os.path.join(cgroup_root, "memory.current")),
            "limit": limit if limit is None or limit < HUGE_LIMIT else None,
            "oom": {"oom": events.get("oom"), "oom_kill": events.get("oom_kill")},
        }
    return {"source": None, "usage": None, "limit": None, "oom": None}


# memory.stat keys per cgroup version: v1 counts the whole subtree under "total_*"
STAT_KEYS = {
    "cgroup-v1": {"anon": "total_rss", "file": "total_cache", "shmem": "total_shmem",
                  "inactive_file": "total_inactive_file", "active_file": "total_active_file",
                  "mapped_file": "total_mapped_file", "dirty": "total_dirty",
                  "writeback": "total_writeback"},
    "cgroup-v2": {"anon": "anon", "file": "file", "shmem": "shmem",
                  "inactive_file": "inactive_file", "active_file": "active_file",
                  "mapped_file": "file_mapped", "dirty": "file_dirty",
                  "writeback": "file_writeback"},
}
UNRECLAIMABLE = ("shmem", "mapped_file", "dirty", "writeback")  # file pages that stay


def cgroup_dir(cgroup_root: str, source: str | None) -> str | None:
    """The folder of the container's memory cgroup files for a cgroup_memory() source."""
    if source == "cgroup-v1":
        return os.path.join(cgroup_root, "memory")
    if source == "cgroup-v2":
        return cgroup_root
    return None


def memory_stat(cgroup_root: str, source: str | None) -> dict[str, int | None]:
    """anon, file (page cache, tmpfs included), shmem, inactive_file, active_file and
    mapped_file in bytes from memory.stat, under the same names for v1 and v2."""
    folder = cgroup_dir(cgroup_root, source)
    keys = STAT_KEYS.get(source or "", {})
    stat = (read_kv(os.path.join(folder, "memory.stat")) or {}) if folder else {}
    return {name: stat.get(key) for name, key in keys.items()}


def reclaimable_cache(st: dict[str, int | None]) -> int | None:
    """Page cache the kernel drops on demand: the cgroup's file pages less tmpfs and /dev/shm
    (shmem: no swap to go to), less the pages a live process maps (mapped_file, which can
    count mapped shmem as well: the figure errs low, never high), less dirty and writeback
    pages (written out before they can go). Active and inactive alike: once nobody maps
    them, the active list is reclaimed as surely as the inactive one, only later."""
    file = st.get("file")
    if file is None:
        return None
    return max(0, file - sum(st.get(k) or 0 for k in UNRECLAIMABLE))


def cgroup_working_set(cgroup_root: str, source: str | None, usage: int) -> dict[str, Any]:
    """The cgroup's working set (usage less reclaimable_cache) and the figures behind it."""
    st = memory_stat(cgroup_root, source)
    cache = reclaimable_cache(st)
    return {"working_set": max(0, usage - (cache or 0)), "page_cache": cache, **st}


def working_memory(cgroup_root: str, proc: str) -> dict[str, Any]:
    """The memory that matters: the working set, i.e. usage less the page cache no live
    process maps (reclaimable_cache), against the cgroup limit; where the container has no
    limit, MemTotal - MemAvailable against MemTotal. Also the figures behind it: page_cache
    (what was not counted), anon, shmem, file, active/inactive file, mapped, dirty."""
    m = cgroup_memory(cgroup_root)
    usage, limit, source = m["usage"], m["limit"], m["source"]
    if usage is not None and limit is not None:
        return {"usage": usage, "limit": limit, "source": source,
                **cgroup_working_set(cgroup_root, source, usage)}
    mi = meminfo(proc)
    if "MemTotal" in mi and "MemAvailable" in mi:
        total, cached = mi["MemTotal"], mi.get("Cached")
        shmem = mi.get("Shmem")
        return {"usage": total - mi["MemAvailable"], "limit": total, "source": "meminfo",
                "working_set": total - mi["MemAvailable"],
                "page_cache": None if cached is None else max(0, cached - (shmem or 0)),
                "anon": mi.get("AnonPages"), "file": cached, "shmem": shmem,
                "inactive_file": mi.get("Inactive(file)"), "active_file": mi.get("Active(file)"),
                "mapped_file": mi.get("Mapped")}
    return {"usage": usage, "limit": None, "source": source, "working_set": usage,
            "page_cache": None}


STATUS_MEMORY = {"RssAnon:": "anon", "RssFile:": "file", "RssShmem:": "shmem"}


def process_memory(proc: str, pid: int) -> dict[str, int] | None:
    """What one process holds, by kind (/proc/PID/status): anon, file (mapped files, shared
    libraries too) and shmem bytes, and rss, their sum; None when it is gone."""
    text = read_text(f"{proc}/{pid}/status")
    if text is None:
        return None
    held = {"anon": 0, "file": 0, "shmem": 0}
    for line in text.splitlines():
        parts = line.split()
        if len(parts) >= 2 and parts[0] in STATUS_MEMORY and parts[1].isdigit():
            held[STATUS_MEMORY[parts[0]]] = int(parts[1]) * 1024
    return {**held, "rss": sum(held.values())}


def cgroup_pids(cgroup_root: str, source: str | None, proc: str) -> list[int]:
    """Processes charged to the container's memory cgroup (every process when unknown)."""
    folder = cgroup_dir(cgroup_root, source)
    text = read_text(os.path.join(folder, "cgroup.procs")) if folder else None
    if text is None:
        return all_pids(proc)
    return [int(n) for n in text.split() if n.isdigit()]


def parents_of(proc: str, pids: Iterable[int]) -> dict[int, int]:
    """{pid: its parent's pid} for the pids still there."""
    out: dict[int, int] = {}
    for pid in pids:
        fields = proc_stat(proc, pid)
        if fields and len(fields) > 1 and fields[1].lstrip("-").isdigit():
            out[pid] = int(fields[1])
    return out


def under(pid: int, tops: set[int], parent: dict[int, int], limit: int = 64) -> bool:
    """pid is one of tops or descends from one of them (bounded: a cycle ends the walk)."""
    for _ in range(limit):
        if pid in tops:
            return True
        if pid not in parent or pid <= 1:
            return False
        pid = parent[pid]
    return False


NEIGHBOURS_LISTED = 10


def neighbours(cgroup_root: str, source: str | None, proc: str, daemons: Iterable[int]
               ) -> dict[str, Any]:
    """Memory other processes in the container hold (a curio sidecar, rollout's supervisor
    and guard): every process charged to the cgroup but the daemons and their children and
    this script's own session. bytes: their RSS added up (shared pages count in each: the
    figure errs high); processes: the biggest, each with what it holds."""
    pids = cgroup_pids(cgroup_root, source, proc)
    parent = parents_of(proc, set(pids) | set(all_pids(proc)))
    mine = {p for p in [os.getpid(), *proc_ancestors(proc, os.getpid())] if p > 1}
    skip = set(daemons)
    rows: list[dict[str, Any]] = []
    for pid in pids:
        held = None if pid in mine or under(pid, skip, parent) else process_memory(proc, pid)
        if held and held["rss"]:
            rows.append({"pid": pid, "cmdline": " ".join(proc_cmdline(proc, pid))[:200], **held})
    rows.sort(key=lambda r: -int(r["rss"]))
    return {"bytes": sum(int(r["rss"]) for r in rows), "count": len(rows),
            "processes": rows[:NEIGHBOURS_LISTED]}


def meminfo(proc: str) -> dict[str, int]:
    """/proc/meminfo: MemTotal, MemAvailable, ... in bytes."""
    out: dict[str, int] = {}
    for line in (read_text(f"{proc}/meminfo") or "").splitlines():
        parts = line.replace(":", " ").split()
        if len(parts) >= 2:
            with contextlib.suppress(ValueError):
                mult = 1024 if len(parts) > 2 and parts[2].lower() == "kb" else 1
                out[parts[0]] = int(parts[1]) * mult
    return out


def tail_window(path: str, max_bytes: int) -> tuple[bytes, int, int]:
    """(the last max_bytes of a file, starting at a line boundary), its offset, file size."""
    with open(path, "rb") as f:
        f.seek(0, os.SEEK_END)
        size = f.tell()
        start = max(0, size - max_bytes)
        f.seek(start)
        data = f.read(size - start)
    if start > 0:
        cut = data.find(b"\n")
        data = data[cut + 1 :] if cut >= 0 else b""
        start = size - len(data)
    return data, start, size


def parse_jsonl(lines: Iterable[str | bytes]) -> list[Any]:
    """The lines that are JSON, decoded; the others (cut, blank, garbage) are skipped."""
    out: list[Any] = []
    for line in lines:
        with contextlib.suppress(ValueError):
            out.append(json.loads(line))
    return out


class Collector:
    """Gathers one JSON object piece by piece: a piece that raises becomes None, its error kept."""

    def __init__(self) -> None:
        self.errors: dict[str, str] = {}

    def safe(self, key: str, fn: Callable[[], Any]) -> Any:
        try:
            return fn()
        except Exception as e:  # a missing piece becomes null, never a failure
            self.errors[key] = f"{type(e).__name__}: {e}"
            return None


TCP_LISTEN = 10  # the kernel's TCP state number (include/net/tcp_states.h)
DIAG_CAP = 8 << 20  # bytes of sock_diag answers read at most


def diag_listeners(family: int) -> list[tuple[int, int]] | None:
    """(port, socket inode) of every TCP socket listening in this network namespace for
    one address family, asked of the kernel's sock_diag (netlink, as `ss -ltn` does): it
    walks the listening sockets alone, where reading /proc/net/tcp walks every bucket of
    the connection table (4 ms a file on a 24 GiB machine, more on a GPU host's). None
    where it cannot answer (no netlink, no inet_diag): read /proc/net then."""
    import socket
    import struct

    request = struct.pack("=BBBBI", family, socket.IPPROTO_TCP, 0, 0, 1 << TCP_LISTEN)
    request += bytes(48)  # struct inet_diag_sockid: any address, any port
    header = struct.pack("=IHHII", 16 + len(request), 20, 0x301, 1, 0)  # SOCK_DIAG_BY_FAMILY,
    found: list[tuple[int, int]] = []                                   # REQUEST|DUMP
    read = 0
    try:
        with socket.socket(socket.AF_NETLINK, socket.SOCK_DGRAM, 4) as sock:  # NETLINK_SOCK_DIAG
            sock.settimeout(2.0)
            sock.sendto(header + request, (0, 0))
            while read < DIAG_CAP:
                data = sock.recv(1 << 16)
                read += len(data)
                at = 0
                while at + 16 <= len(data):
                    length, kind = struct.unpack_from("=IH", data, at)
                    if length < 16 or at + length > len(data) or kind == 2:  # NLMSG_ERROR
                        return None
                    if kind == 3:  # NLMSG_DONE
                        return found
                    if kind == 20 and length >= 16 + 72:  # struct inet_diag_msg
                        port = struct.unpack_from(">H", data, at + 20)[0]
                        inode = struct.unpack_from("=I", data, at + 16 + 68)[0]
                        found.append((port, inode))
                    at += (length + 3) & ~3
                if not data:
                    return None
    except (OSError, ValueError, AttributeError, struct.error):
        return None
    return None


def listening_inodes(proc: str, ports: Iterable[int]) -> dict[int, set[int]]:
    """Socket inodes listening on each TCP port (any address, IPv4 or IPv6) in this network
    namespace: from sock_diag (diag_listeners), else from /proc/net/tcp and tcp6, each read
    once for all the ports. A `proc` other than /proc (a test's) is read as files."""
    import socket

    found: dict[int, set[int]] = {p: set() for p in ports}
    if proc == "/proc":
        v4, v6 = diag_listeners(socket.AF_INET), diag_listeners(socket.AF_INET6)
        if v4 is not None and v6 is not None:
            for port, inode in v4 + v6:
                if port in found and inode:
                    found[port].add(inode)
            return found
    for name in ("tcp", "tcp6"):
        for line in (read_text(f"{proc}/net/{name}") or "").splitlines()[1:]:
            parts = line.split()
            if len(parts) < 10 or parts[3] != "0A":  # 0A: TCP_LISTEN
                continue
            with contextlib.suppress(ValueError):
                port = int(parts[1].rpartition(":")[2], 16)
                if port in found:
                    found[port].add(int(parts[9]))
    for inodes in found.values():
        inodes.discard(0)
    return found


def socket_holders(proc: str, inodes: set[int]) -> dict[int, list[int]]:
    """For each of these socket inodes, the pids holding it open, from one look at every
    /proc/PID/fd (pids in ascending order)."""
    holders: dict[int, list[int]] = {}
    if not inodes:
        return holders
    links = {f"socket:[{i}]": i for i in inodes}
    for pid in all_pids(proc):
        fd_dir = f"{proc}/{pid}/fd"
        try:
            fds = os.listdir(fd_dir)
        except OSError:
            continue
        held: set[int] = set()
        for fd in fds:
            try:
                inode = links.get(os.readlink(f"{fd_dir}/{fd}"))
            except OSError:
                continue
            if inode is not None and inode not in held:
                held.add(inode)
                holders.setdefault(inode, []).append(pid)
    return holders


def proc_age(proc: str, pid: int) -> float | None:
    """Seconds since the process started (from /proc/uptime: no wall clock involved)."""
    starttime = proc_starttime(proc, pid)
    uptime = (read_text(f"{proc}/uptime") or "").split()
    if starttime is None or not uptime:
        return None
    try:
        return round(float(uptime[0]) - starttime / os.sysconf("SC_CLK_TCK"), 2)
    except (ValueError, OSError):
        return None


def proc_ancestors(proc: str, pid: int, limit: int = 32) -> list[int]:
    """The parent, grandparent, ... of a process, up to pid 1 (bounded)."""
    chain: list[int] = []
    while len(chain) < limit:
        fields = proc_stat(proc, pid)
        try:
            pid = int(fields[1]) if fields and len(fields) > 1 else 0
        except ValueError:
            pid = 0
        if pid <= 0:
            break
        chain.append(pid)
        if pid == 1:
            break
    return chain


def process_brief(proc: str, pid: int) -> dict[str, Any]:
    """pid, parent chain, command line, executable and age of one process (for messages)."""
    return {"pid": pid, "ancestors": proc_ancestors(proc, pid),
            "cmdline": " ".join(proc_cmdline(proc, pid))[:300],
            "exe": proc_exe(proc, pid), "age_secs": proc_age(proc, pid)}


def ports_owners(proc: str, ports: Iterable[int]) -> dict[int, list[dict[str, Any]]]:
    """For each TCP port, every process holding a socket that listens on it, briefly
    described; /proc read once for all the ports."""
    by_port = listening_inodes(proc, ports)
    holders = socket_holders(proc, {i for inodes in by_port.values() for i in inodes})
    return {port: [brief for brief in (
                process_brief(proc, pid)
                for pid in sorted({p for i in inodes for p in holders.get(i, [])}))
                   if _still_there(proc, brief)]
            for port, inodes in by_port.items()}


def _still_there(proc: str, brief: dict[str, Any]) -> bool:
    """A holder gone before it could be described held the socket only for a moment (a
    fork of the daemon on its way to closing its descriptors and exec): it holds nothing."""
    return brief.get("age_secs") is not None or os.path.isdir(f"{proc}/{brief.get('pid')}")


def port_owners(proc: str, port: int) -> list[dict[str, Any]]:
    """Every process holding a socket that listens on TCP `port`, briefly described."""
    return ports_owners(proc, [port])[port]


DAEMON_NAMES = ("cuzk-daemon", "cuzk")  # `make cuzk` copies cuzk-daemon to ./cuzk


def is_cuzk_daemon(proc: str, pid: int) -> bool:
    """A cuzk daemon, whoever started it: its program or its argv[0] is named cuzk-daemon or
    cuzk (never cuzk-bench, a client)."""
    argv = proc_cmdline(proc, pid)
    names = {os.path.basename(proc_program(proc, pid) or ""),
             os.path.basename(argv[0]) if argv else ""}
    return any(n in DAEMON_NAMES for n in names)


def all_pids(proc: str) -> list[int]:
    try:
        return sorted(int(d) for d in os.listdir(proc) if d.isdigit())
    except OSError:
        return []


def cuzk_processes(proc: str, supervisor_pid: int | None) -> list[dict[str, Any]]:
    """Every cuzk daemon process on the host, whatever its parent: pid, parent, executable,
    command line, start time, uptime, state, and whether the supervisor (supervisor_pid,
    trusted by the caller) is its parent or ancestor."""
    out: list[dict[str, Any]] = []
    for pid in all_pids(proc):
        if pid == os.getpid() or not is_cuzk_daemon(proc, pid):
            continue
        brief = process_brief(proc, pid)
        fields = proc_stat(proc, pid) or []
        starttime = proc_starttime(proc, pid)
        started = proc_start_epoch(proc, starttime)
        ancestors = brief["ancestors"]
        out.append({**brief, "ppid": ancestors[0] if ancestors else None,
                    "state": "zombie" if fields[:1] in (["Z"], ["X"], ["x"]) else "running",
                    "starttime": starttime, "started_at": started,
                    "supervised": supervisor_pid is not None and supervisor_pid in ancestors})
    return out


# ---------------------------------------------------------------- drain answers, for people


NAMED_HOLDERS = 3  # processes and /dev/shm files a failed drain names


def format_size(n: Any) -> str:
    """Bytes for people (512.0MiB); "-" for anything that is not a number."""
    if not isinstance(n, (int, float)) or isinstance(n, bool):
        return "-"
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return f"{n:.0f}{unit}" if unit == "B" else f"{n:.1f}{unit}"
        n = n / 1024
    return str(n)


def _first(items: Any) -> list[dict[str, Any]]:
    listed = items[:NAMED_HOLDERS] if isinstance(items, list) else []
    return [i for i in listed if isinstance(i, dict)]


def _held(p: dict[str, Any]) -> str:
    """What one process holds, by kind where the host said so, else its RSS."""
    kinds = [k for k in ("anon", "file", "shmem") if k in p]
    if not kinds:
        return f"RSS {format_size(p.get('rss'))}"
    return "holds " + ", ".join(f"{k if k != 'file' else 'mapped file'} "
                                f"{format_size(p.get(k))}" for k in kinds)


def _holder_names(holders: Any) -> list[str]:
    held = holders if isinstance(holders, dict) else {}
    names = [f"{f.get('path')} ({format_size(f.get('bytes'))} in /dev/shm)"
             for f in _first(held.get("shm")) if f.get("bytes")]
    names += [f"pid {p.get('pid')} `{p.get('cmdline') or '?'}` ({_held(p)})"
              for p in _first(held.get("processes"))]
    figures = ", ".join(f"{k} {format_size(held.get(k))}" for k in ("anon", "shmem", "file"))
    return [*names, f"the cgroup's {figures}"]


def _counted(out: dict[str, Any], mem: dict[str, Any]) -> str:
    """How the working set was counted: usage less the page cache no live process maps."""
    if mem.get("source") == "meminfo":
        return "MemTotal less MemAvailable: the host shows no cgroup limit"
    parts = ", ".join(f"{name} {format_size(mem.get(key))}" for key, name in (
        ("shmem", "tmpfs/shm"), ("mapped_file", "mapped"), ("dirty", "dirty"),
        ("writeback", "writeback")) if mem.get(key))
    less = f" less {parts}" if parts else ""
    return (f"usage {format_size(mem.get('usage'))} less {format_size(out.get('page_cache'))}"
            f" of page cache no live process maps (file {format_size(mem.get('file'))}"
            f"{less}; active or inactive alike)")


def drain_failure(out: dict[str, Any]) -> str:
    """Why the drain did not drain: what it counted, and what still holds the memory, each
    holder by what it holds. The drain step and the guard both say it this way; ops.drain's
    answer is read as hostile data (a field missing or of the wrong type shows as "-")."""
    memory = out.get("memory")
    mem: dict[str, Any] = memory if isinstance(memory, dict) else {}
    limit, ws = mem.get("limit"), out.get("working_set")
    numbers = [v for v in (limit, ws) if isinstance(v, (int, float)) and not isinstance(v, bool)]
    headroom = numbers[0] - numbers[1] if len(numbers) == 2 else None
    figures = (
        f"working set {format_size(ws)} ({_counted(out, mem)}) of limit {format_size(limit)}: "
        f"headroom {format_size(headroom)}, budget {format_size(out.get('budget'))}"
    )
    if out.get("outcome") == "plateau":
        why = f"memory stopped falling for {out.get('plateau')}s"
    elif out.get("state") == "running":
        why = f"daemon {out.get('pid')} still running at the drain deadline"
    else:
        why = "drain deadline passed"
    return f"{why}: {figures}; held by: " + "; ".join(_holder_names(out.get("holders")))


RESULT_HEADER = "=== Proof Result ==="  # cuzk-bench's result block starts with this line


def _result_block(lines: list[str], start: int) -> list[str]:
    """The lines of the result block whose header is lines[start], up to a blank line."""
    block: list[str] = []
    for line in lines[start + 1:]:
        if not line.strip():
            break
        block.append(line.strip())
    return block


def _field(block: list[str], key: str) -> list[str]:
    return [ln.split(":", 1)[1].strip() for ln in block if ln.startswith(key + ":")]


def proof_verdict(stdout: str, pattern: str) -> tuple[bool, str]:
    """(whether the bench's stdout says the proof passed, why or why not). Only the bench's
    own result block counts: exactly one `=== Proof Result ===` block (up to a blank line)
    with exactly one `status:` line, COMPLETED, and `pattern` (validate.success_pattern)
    matching inside that block. A status line outside the block, a second block, a FAILED
    status anywhere, or anything on stderr (never passed here) never makes a success."""
    lines = stdout.splitlines()
    starts = [i for i, ln in enumerate(lines) if ln.strip() == RESULT_HEADER]
    if len(starts) != 1:
        return False, (f"{len(starts)} result blocks ({RESULT_HEADER}): exactly one expected"
                       if starts else f"no result block ({RESULT_HEADER})")
    block = _result_block(lines, starts[0])
    statuses = _field(block, "status")
    if len(statuses) != 1:
        return False, f"the result block has {len(statuses)} status lines: exactly one expected"
    if statuses[0] != "COMPLETED":
        errors = _field(block, "error")
        return False, f"status {statuses[0]}" + (f": {errors[0]}" if errors else "")
    if any(re.match(r"\s*status:\s*FAILED", ln) for ln in lines):
        return False, "a FAILED status line outside the result block"
    if pattern and not re.search(pattern, "\n".join(block), re.MULTILINE):
        return False, f"no line matching {pattern!r} in the result block"
    return True, "status COMPLETED"

