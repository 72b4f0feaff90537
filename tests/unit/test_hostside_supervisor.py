"""The host supervisor, run for real against a temp root with a stand-in daemon script."""

from __future__ import annotations

import contextlib
import json
import os
import platform
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from rollout.host.scripts import script_text
from rollout.host.scripts import supervisor as sup_mod

RELEASE = "abc123def456"
# run the host scripts under another interpreter, e.g. a python3.9 like the oldest hosts'
PYTHON = os.environ.get("ROLLOUT_HOSTSIDE_PYTHON", sys.executable)

FAKE_DAEMON = """#!{python}
import os, sys, time
root = {root!r}
behavior = open(os.path.join(root, "behavior")).read().split() if os.path.exists(
    os.path.join(root, "behavior")) else ["sleep"]
print("fake daemon", os.getpid(), sys.argv[1:], behavior, flush=True)
if behavior[0] == "exit":
    sys.exit(int(behavior[1]))
if behavior[0] == "zombie-leader":  # the main thread ends, another lives on until released
    import ctypes, signal, threading
    def linger():
        while not os.path.exists(os.path.join(root, "release-threads")):
            time.sleep(0.02)
        os.kill(os.getpid(), signal.SIGKILL)
    threading.Thread(target=linger).start()
    ctypes.CDLL(None).syscall(int(behavior[1]), 0)  # SYS_exit: this thread only
if behavior[0] == "fork":  # a child of its own, same program (the stand-in's pool keeper)
    if os.fork() == 0:
        while not os.path.exists(os.path.join(root, "test-over")):
            time.sleep(0.05)
        os._exit(0)
end = time.time() + 60
while time.time() < end and not os.path.exists(os.path.join(root, "test-over")):
    time.sleep(0.05)
"""

# A launcher that reaps its child late (like the lab's late reaper): the daemon stays a
# zombie until the file GO exists, then the launcher stamps the time (before the change it
# marks), reaps it and exits with the daemon's status.
FAKE_LAUNCHER = """#!{python}
import os, signal, sys, time
go = sys.argv[1]
argv = sys.argv[3:]
pid = os.fork()
if pid == 0:
    os.execv(argv[0], argv)
while True:
    try:
        with open("/proc/%d/stat" % pid) as f:
            state = f.read().rsplit(")", 1)[1].split()[0]
    except OSError:
        state = "gone"
    if state == "Z":
        break
    time.sleep(0.02)
while not os.path.exists(go):
    time.sleep(0.02)
with open(go + ".reaped", "w") as f:
    f.write(repr(time.time()))
_, status = os.waitpid(pid, 0)
if os.WIFSIGNALED(status):
    sig = os.WTERMSIG(status)
    if sig != signal.SIGKILL:
        signal.signal(sig, signal.SIG_DFL)
    os.kill(os.getpid(), sig)
sys.exit(os.WEXITSTATUS(status))
"""


def wait_for(pred: Callable[[], Any], timeout: float = 60.0, step: float = 0.02) -> Any:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        value = pred()
        if value:
            return value
        time.sleep(step)
    raise AssertionError(f"condition not met within {timeout} s")


def jsonl(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def read_pidfile(root: Path) -> tuple[int, int, str] | None:
    try:
        parts = (root / "rollout" / "daemon.pid").read_text().split()
        return int(parts[0]), int(parts[1]), parts[2]
    except (OSError, ValueError, IndexError):
        return None


def alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def like_a_session() -> None:
    """Start the supervisor at oom_score_adj 500, as from a lab host's login session."""
    with open("/proc/self/oom_score_adj", "w") as f:
        f.write("500")


class Host:
    def __init__(self, tmp: Path) -> None:
        self.root = tmp / "data"
        self.cg = tmp / "cgroup"
        self.rel = self.root / "releases" / RELEASE
        self.rel.mkdir(parents=True)
        self.exe = self.rel / "cuzk-daemon"
        self.exe.write_text(FAKE_DAEMON.format(python=sys.executable, root=str(self.root)))
        self.exe.chmod(0o755)
        (self.root / "current").symlink_to(f"releases/{RELEASE}")
        (self.root / "rollout").mkdir()
        self.cg.mkdir()
        (self.cg / "cgroup.controllers").write_text("memory\n")
        (self.cg / "memory.current").write_text("1000\n")
        (self.cg / "memory.max").write_text("max\n")
        (self.cg / "memory.events").write_text("low 0\nhigh 0\nmax 0\noom 2\noom_kill 1\n")
        self.procs: list[subprocess.Popen[bytes]] = []
        self.script = tmp / "supervisor.py"  # uploaded as a file, as on the hosts
        self.script.write_text(script_text("supervisor"))

    def path(self, name: str) -> Path:
        return self.root / "rollout" / name

    def start(self, *extra: str, wait: bool = True) -> subprocess.Popen[bytes]:
        args = [PYTHON, str(self.script), "--root", str(self.root),
                "--cgroup-root", str(self.cg), "--daemon-args", "-c /data/zk/cuzk.toml",
                "--backoff-initial", "0.02", "--poll-interval", "0.02", *extra]
        p = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                             preexec_fn=like_a_session)
        self.procs.append(p)
        if wait:
            wait_for(lambda: self.path("supervisor.pid").exists())
        return p

    def daemon(self, not_pid: int | None = None, timeout: float = 60.0) -> tuple[int, int, str]:
        def ready() -> tuple[int, int, str] | None:
            pf = read_pidfile(self.root)
            return pf if pf and pf[0] != not_pid and alive(pf[0]) else None
        return wait_for(ready, timeout)  # type: ignore[no-any-return]

    def state_is(self, state: str, **fields: Any) -> dict[str, Any] | None:
        """The supervisor's state once it is `state` (and has these fields), else None."""
        st = self.state()
        if st.get("state") != state or any(st.get(k) != v for k, v in fields.items()):
            return None
        return st

    def exits(self) -> list[dict[str, Any]]:
        return jsonl(self.path("exits.jsonl"))

    def starts(self) -> list[dict[str, Any]]:
        return jsonl(self.path("starts.jsonl"))

    def state(self) -> dict[str, Any]:
        try:
            return json.loads(self.path("supervisor.json").read_text())  # type: ignore[no-any-return]
        except (OSError, ValueError):
            return {}

    def cleanup(self) -> None:
        (self.root / "test-over").write_text("")  # stand-in daemons exit by themselves
        self.path("hold").write_text("")
        if any(p.poll() is None for p in self.procs):
            with contextlib.suppress(AssertionError):  # let the supervisor reap them first
                wait_for(lambda: read_pidfile(self.root) is None, 1.0)
        for p in self.procs:
            if p.poll() is None:
                p.terminate()
                try:
                    p.wait(3)
                except subprocess.TimeoutExpired:
                    p.kill()
                    p.wait()
        pids = {s["pid"] for s in self.starts()} | {s.get("launcher_pid") for s in self.starts()}
        sp = self.path("supervisor.pid")
        if sp.exists():
            pids.add(int(sp.read_text().split()[0]))
        for pid in pids:
            if pid and pid != os.getpid():
                with contextlib.suppress(OSError):
                    os.kill(pid, signal.SIGKILL)


@pytest.fixture
def host(tmp_path: Path) -> Iterator[Host]:
    h = Host(tmp_path)
    try:
        yield h
    finally:
        h.cleanup()


def test_starts_daemon_and_writes_pidfile_starts_and_state(host: Host) -> None:
    host.start()
    pid, starttime, exe = host.daemon()
    assert exe == str(host.exe.resolve())
    cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().decode().split("\0")
    assert exe in cmdline and "-c" in cmdline and "/data/zk/cuzk.toml" in cmdline
    stat = Path(f"/proc/{pid}/stat").read_text()
    assert int(stat.rsplit(")", 1)[1].split()[19]) == starttime
    assert os.getsid(pid) == pid  # its own session: a signal to the supervisor's group misses it
    with open(f"/proc/{pid}/oom_score_adj") as f:  # the OOM killer takes it, not us
        assert f.read().strip() == "1000"
    start = wait_for(host.starts)[0]
    assert start["pid"] == pid and start["release"] == RELEASE
    assert start["memory"] == {"usage": 1000, "limit": None, "source": "cgroup-v2"}
    # memory before the start, for the drain after it: no cgroup limit here, so MemAvailable
    assert start["baseline"]["source"] == "meminfo" and start["baseline"]["working_set"] > 0
    st = wait_for(lambda: host.state() if host.state().get("state") == "running" else None)
    assert st["daemon_pid"] == pid
    sp = host.path("supervisor.pid").read_text().split()
    assert len(sp) == 2 and int(sp[0]) == host.procs[0].pid
    # a second OOM strike right after the daemon's must take a login session (lab-init and
    # rented hosts run them at 500), not the supervisor: it lowered its score from theirs
    adj = int(Path(f"/proc/{sp[0]}/oom_score_adj").read_text())
    assert adj <= 0 and (adj == -900 or "the supervisor runs at 0" in host.path(
        "supervisor.log").read_text())
    # the daemon writes its own first line: it may come a moment after the supervisor's state
    assert wait_for(lambda: "fake daemon" in host.path("daemon.log").read_text())


def test_reaps_promptly_and_records_signal_and_exit_code(host: Host) -> None:
    host.start()
    pid, _, _ = host.daemon()
    killed = time.time()
    os.kill(pid, signal.SIGKILL)
    ex = wait_for(host.exits)[0]
    assert ex["pid"] == pid and ex["signal"] == "SIGKILL" and ex["exit_code"] is None
    assert ex["time"] >= killed and ex["recorded"] >= ex["time"]
    assert ex["release"] == RELEASE and ex["held"] is False and ex["status_from"] == "daemon"
    assert ex["oom"] == {"oom": 2, "oom_kill": 1}
    assert ex["memory"]["source"] == "cgroup-v2" and ex["uptime_secs"] >= 0
    assert not Path(f"/proc/{pid}").exists()  # reaped: not even a zombie

    pid2, _, _ = host.daemon(not_pid=pid)
    os.kill(pid2, signal.SIGTERM)
    ex = wait_for(lambda: host.exits()[1:])[0]
    assert ex["pid"] == pid2 and ex["signal"] == "SIGTERM"

    pid3, _, _ = host.daemon(not_pid=pid2)
    (host.root / "behavior").write_text("exit 7")
    os.kill(pid3, signal.SIGKILL)
    ex = wait_for(lambda: [e for e in host.exits() if e["exit_code"] == 7])[0]
    assert ex["signal"] is None


SYS_EXIT = {"x86_64": 60, "aarch64": 93}.get(platform.machine())


@pytest.mark.skipif(SYS_EXIT is None, reason="SYS_exit number unknown on this machine")
def test_a_zombie_whose_threads_still_exit_is_recorded_with_its_status(host: Host) -> None:
    """A killed daemon's leader shows as Z while its other threads still exit (freeing
    lots of memory takes time), and waitpid has nothing yet: the exit is recorded once its
    status comes, never without it."""
    (host.root / "behavior").write_text(f"zombie-leader {SYS_EXIT}")
    host.start()
    pid = wait_for(lambda: (read_pidfile(host.root) or (0,))[0])
    wait_for(lambda: not alive(pid))  # the leader is a zombie, a thread still runs
    wait_for(lambda: "waiting for its exit status" in host.path("supervisor.log").read_text())
    assert host.exits() == []
    (host.root / "behavior").write_text("sleep")
    (host.root / "release-threads").write_text("")
    ex = wait_for(host.exits)[0]
    assert ex["pid"] == pid and ex["signal"] == "SIGKILL" and ex["status_from"] == "daemon"


def test_never_blocks_repeated_kills_each_restart(host: Host) -> None:
    host.start("--crash-loop-restarts", "50", "--backoff-initial", "0.01", "--backoff-max", "0.02")
    pids = []
    prev = None
    for _ in range(6):
        pid, _, _ = host.daemon(not_pid=prev)
        pids.append(pid)
        os.kill(pid, signal.SIGKILL)
        prev = pid
    host.daemon(not_pid=prev)
    exits = wait_for(lambda: host.exits() if len(host.exits()) >= 6 else None)
    assert [e["pid"] for e in exits] == pids
    assert len(set(pids)) == 6


def test_backoff_grows_exponentially(host: Host) -> None:
    (host.root / "behavior").write_text("exit 3")
    host.start("--backoff-initial", "0.02", "--backoff-max", "10", "--crash-loop-restarts", "99")
    starts = wait_for(lambda: host.starts() if len(host.starts()) >= 5 else None)[:5]
    # the delay each start waited, as the supervisor decided it: doubling from the first
    assert [s["backoff"] for s in starts] == [0.0, 0.02, 0.04, 0.08, 0.16]
    # and it really waited that long (at least; a loaded machine only makes gaps longer)
    for before, start in zip(starts, starts[1:]):  # noqa: B905 - equal by construction
        assert start["time"] - before["time"] >= start["backoff"] - 0.01, starts
    assert all(e["exit_code"] == 3 for e in host.exits())
    assert host.state()["state"] in ("backoff", "running")


def test_crash_loop_state_and_long_wait(host: Host) -> None:
    (host.root / "behavior").write_text("exit 1")
    host.start("--backoff-initial", "0.05", "--crash-loop-restarts", "3",
               "--crash-loop-window", "3600", "--backoff-max", "3600")
    st = wait_for(lambda: host.state_is("crash-looping"))
    assert len(st["restarts"]) >= 3 and "next try in 3600 s" in st["reason"]
    assert st["next_start_at"] - st["updated"] > 3000  # waits backoff-max before the next try
    n = len(host.starts())
    host.path("hold").write_text("")  # a later tick, seen from outside: still no start
    wait_for(lambda: host.state_is("held"))
    assert len(host.starts()) == n


def test_hold_prevents_restart_until_removed(host: Host) -> None:
    host.start()
    pid, _, _ = host.daemon()
    host.path("hold").write_text("")
    wait_for(lambda: host.state_is("held"))
    os.kill(pid, signal.SIGKILL)
    ex = wait_for(host.exits)[0]
    assert ex["held"] is True
    # the tick after the exit decided, with the daemon gone, to start nothing while held
    wait_for(lambda: host.state_is("held", reason="hold file present", daemon_pid=None))
    assert len(host.starts()) == 1 and read_pidfile(host.root) is None
    host.path("hold").unlink()
    host.daemon(not_pid=pid)
    again = wait_for(lambda: host.starts()[1:])[0]
    assert again["backoff"] == 0.0  # a deliberate stop is not a crash: no backoff


def test_sigterm_leaves_daemon_running_and_next_supervisor_adopts_it(host: Host) -> None:
    p = host.start()
    pid, _, _ = host.daemon()
    p.send_signal(signal.SIGTERM)
    assert p.wait(60) == 0
    assert alive(pid)
    st = host.state()
    assert st["state"] == "stopped" and not host.path("supervisor.pid").exists()
    second = host.start()
    # the new supervisor's first word on the daemon: the one it adopted, no new start
    wait_for(lambda: host.state_is("running", supervisor_pid=second.pid))
    assert read_pidfile(host.root) is not None and read_pidfile(host.root)[0] == pid  # type: ignore[index]
    assert host.state()["daemon_pid"] == pid
    assert len(host.starts()) == 1
    os.kill(pid, signal.SIGKILL)
    ex = wait_for(host.exits)[0]
    assert ex["pid"] == pid and ex["adopted"] is True and ex["signal"] is None
    host.daemon(not_pid=pid)


def test_second_instance_exits_zero_saying_already_running(host: Host) -> None:
    first = host.start()
    host.daemon()
    second = host.start(wait=False)
    out, _ = second.communicate(timeout=60)
    assert second.returncode == 0
    msg = json.loads(out)
    assert msg["status"] == "already-running" and msg["pid"] == first.pid
    assert first.poll() is None


def test_daemonize_detaches_and_writes_pidfile(host: Host) -> None:
    p = host.start("--daemonize", wait=False)
    out, _ = p.communicate(timeout=60)
    assert p.returncode == 0
    msg = json.loads(out)
    assert msg["status"] == "started"
    spid = int(host.path("supervisor.pid").read_text().split()[0])
    assert spid == msg["pid"] and spid != p.pid and alive(spid)
    assert os.getsid(spid) != os.getsid(0)  # setsid, then a second fork: no tty ever
    host.daemon()
    os.kill(spid, signal.SIGTERM)
    wait_for(lambda: not alive(spid))
    assert "supervisor exiting" in host.path("supervisor.log").read_text()


def test_launcher_daemon_found_by_cmdline_and_exit_from_launcher(host: Host) -> None:
    launcher = host.root / "late-reaper"
    launcher.write_text(FAKE_LAUNCHER.format(python=sys.executable))
    launcher.chmod(0o755)
    go = host.root / "reap-now"
    host.start("--launcher", f"{launcher} {go} --")
    pid, _, exe = host.daemon()
    start = wait_for(host.starts)[0]
    assert start["launcher_pid"] != pid and start["pid"] == pid
    assert exe in Path(f"/proc/{pid}/cmdline").read_bytes().decode()
    killed = time.time()
    os.kill(pid, signal.SIGKILL)
    # the supervisor sees the death while the launcher still holds the zombie ...
    waiting = f"daemon pid {pid} died; waiting for launcher pid {start['launcher_pid']}"
    wait_for(lambda: waiting in host.path("supervisor.log").read_text())
    assert host.exits() == []  # ... and records nothing before it has the status
    go.write_text("")
    ex = wait_for(host.exits)[0]
    reaped = float(Path(f"{go}.reaped").read_text())
    assert ex["signal"] == "SIGKILL" and ex["status_from"] == "launcher"
    assert killed <= ex["time"] <= reaped <= ex["recorded"]  # died, reaped, then recorded
    host.daemon(not_pid=pid)


def test_a_launcher_that_execs_is_the_daemon_never_a_fork_of_the_daemon(host: Host) -> None:
    """`sh launcher: helper &; exec "$@"` (the lab's mapper launcher): the launcher's own pid
    runs the daemon once it execs; neither its helper nor a child the daemon forks (same
    program, same command line) is taken for the daemon, however long discovery lasts."""
    launcher = host.root / "exec-launcher"
    launcher.write_text('#!/bin/sh\nsleep 30 &\nexec "$@"\n')
    launcher.chmod(0o755)
    (host.root / "behavior").write_text("fork")
    host.start("--launcher", str(launcher), "--discover-timeout", "30")
    start = wait_for(host.starts)[0]
    pid = start["pid"]
    assert "launcher_pid" not in start and "note" not in start, start
    assert Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")[1] == bytes(host.exe)
    wait_for(lambda: Path(f"/proc/{pid}/task/{pid}/children").read_text().split())  # forked
    assert host.daemon()[0] == pid and len(host.starts()) == 1


def test_config_file_and_flags_win(host: Host) -> None:
    host.path("supervisor.conf.json").write_text(json.dumps(
        {"daemon_args": "--from-config", "backoff_max": 7, "crash_loop_restarts": 9}))
    cfg = sup_mod.parse_args(["--root", str(host.root), "--backoff-max", "3"])
    assert cfg["daemon_args"] == "--from-config"
    assert cfg["backoff_max"] == 3.0 and cfg["crash_loop_restarts"] == 9
    assert cfg["backoff_initial"] == 1.0 and cfg["reset_after"] == 60.0
    host.start()  # its --daemon-args flag wins over the file
    pid, _, _ = host.daemon()
    assert "/data/zk/cuzk.toml" in Path(f"/proc/{pid}/cmdline").read_bytes().decode()


def test_no_executable_means_stopped_state(host: Host) -> None:
    (host.root / "current").unlink()
    host.start()
    st = wait_for(lambda: host.state() if host.state().get("state") == "stopped" else None)
    assert "no daemon executable" in st["reason"]
    (host.root / "current").symlink_to(f"releases/{RELEASE}")
    host.daemon()


def test_cgroup_memory_v1_and_v2(tmp_path: Path) -> None:
    v1 = tmp_path / "v1" / "memory"
    v1.mkdir(parents=True)
    (v1 / "memory.usage_in_bytes").write_text("500\n")
    (v1 / "memory.limit_in_bytes").write_text("9223372036854771712\n")
    (v1 / "memory.failcnt").write_text("4\n")
    (v1 / "memory.oom_control").write_text("oom_kill_disable 0\nunder_oom 0\noom_kill 3\n")
    m = sup_mod.cgroup_memory(str(tmp_path / "v1"))
    assert m == {"source": "cgroup-v1", "usage": 500, "limit": None,
                 "oom": {"failcnt": 4, "oom_kill": 3, "under_oom": 0}}
    (v1 / "memory.limit_in_bytes").write_text("1000\n")
    assert sup_mod.cgroup_memory(str(tmp_path / "v1"))["limit"] == 1000
    v2 = tmp_path / "v2"
    v2.mkdir()
    (v2 / "memory.current").write_text("700\n")
    (v2 / "memory.max").write_text("2000\n")
    assert sup_mod.cgroup_memory(str(v2))["limit"] == 2000
    assert sup_mod.cgroup_memory(str(tmp_path / "none"))["source"] is None


def test_describe_status() -> None:
    assert sup_mod.describe_status(7 << 8) == {"exit_code": 7, "signal": None}
    assert sup_mod.describe_status(signal.SIGKILL) == {"exit_code": None, "signal": "SIGKILL"}
    assert sup_mod.describe_status(None) == {"exit_code": None, "signal": None}


def test_a_port_held_by_another_process_blocks_the_start_naming_the_holder(host: Host) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        host.path("supervisor.conf.json").write_text(json.dumps({"ports": [port]}))
        host.start()
        st = wait_for(lambda: host.state() if host.state().get("state") == "blocked" else None)
        assert f"port {port} held by pid {os.getpid()}" in st["reason"]
        assert host.starts() == [] and read_pidfile(host.root) is None
    host.daemon(timeout=5.0)  # the port is free: the supervisor starts the daemon
