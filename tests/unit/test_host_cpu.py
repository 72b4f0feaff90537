"""Less work on the prover (issue 30): calls declared in_agent run in the host's agent
without a fork (a fork stays for everything that can hang, and is still killed at its
timeout), and every host script sent on stdin is compiled once per host, from a code cache
that runs only what it was sealed for."""

from __future__ import annotations

import ast
import contextlib
import hashlib
import inspect
import itertools
import json
import os
import re
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from test_hostside_agent import PipeStream, start_agent

from rollout.engine import guard as engine_guard
from rollout.errors import RolloutError
from rollout.host.scripts import bootstrap, ops, script_text, sized
from rollout.host.scripts.actions.spec import IN_AGENT, spec_of
from rollout.transport import agent as transport_agent
from rollout.transport.agent import HostAgent

MODULE = """import os, sys, time

def in_agent(name, kwargs):
    return name.startswith("here")

def warms(name, kwargs):
    return ["wave"] if name == "needs_wave" else []

def call(name, kwargs):
    if name == "here_loaded":
        return {"loaded": [m for m in kwargs["names"] if m in sys.modules]}
    if name == "here_noisy":
        print("noise on stdout")
        sys.stderr.write("noise on stderr\\n")
    if name.endswith("raises"):
        raise RuntimeError("broken action")
    if name == "sleeps":
        with open(kwargs["pidfile"], "w") as f:
            f.write(str(os.getpid()))
        time.sleep(60)
    return {"pid": os.getpid()}
"""


@pytest.fixture
def agent(tmp_path: Path) -> Iterator[tuple[HostAgent, int]]:
    started, p = start_agent(tmp_path / "cache")
    yield started, p.pid
    started.close()
    assert p.returncode == 0


def _report(agent: HostAgent, name: str, **kwargs: object) -> dict[str, object]:
    r = agent.call(MODULE, f"mod.{name}", kwargs, 30)
    assert r.exit_code == 0, r.stderr
    return dict(json.loads(r.stdout.splitlines()[-1]))


def test_a_call_its_module_says_may_run_here_runs_in_the_agent_without_a_fork(
        agent: tuple[HostAgent, int]) -> None:
    host_agent, agent_pid = agent
    assert _report(host_agent, "here")["pid"] == agent_pid
    assert _report(host_agent, "forked")["pid"] != agent_pid


def test_a_module_a_call_declares_is_imported_by_the_agent_before_its_first_fork(
        agent: tuple[HostAgent, int]) -> None:
    """warms(): what a forked call imports, the agent imports once before it forks it (each
    later fork finds it loaded); a call that declares nothing leaves the agent as it was."""
    host_agent, _ = agent
    assert _report(host_agent, "here_loaded", names=["wave"])["loaded"] == []
    _report(host_agent, "forked")
    assert _report(host_agent, "here_loaded", names=["wave"])["loaded"] == []
    _report(host_agent, "needs_wave")
    assert _report(host_agent, "here_loaded", names=["wave"])["loaded"] == ["wave"]


def _reached_imports() -> dict[str, set[str]]:
    """Per host action, the modules its code imports, itself or through the functions of
    ops it calls (by name): the text the agent runs, read as a tree."""
    tree = ast.parse(script_text("ops"))
    funcs = {n.name: n for n in tree.body if isinstance(n, ast.FunctionDef)}
    direct: dict[str, tuple[set[str], set[str]]] = {}
    for name, fn in funcs.items():
        mods: set[str] = set()
        calls: set[str] = set()
        for node in ast.walk(fn):
            if isinstance(node, ast.Import):
                mods |= {a.name for a in node.names}
            elif isinstance(node, ast.ImportFrom) and node.module:
                mods.add(node.module)
            elif isinstance(node, ast.Name) and node.id in funcs:
                calls.add(node.id)
        direct[name] = (mods, calls)

    def reach(name: str, seen: set[str]) -> set[str]:
        if name in seen:
            return set()
        seen.add(name)
        mods, calls = direct[name]
        return mods.union(*(reach(c, seen) for c in calls))

    return {name: reach(name, set()) for name in ops.ACTIONS}


def test_each_action_declares_the_costly_module_its_code_imports() -> None:
    """spec.WARMS against the code: an action whose code reaches `import http.client` (the
    /status readers) declares it, and no other does; status's calls (facts, the guards'
    look) declare none, so `rollout status` never loads it on a host."""
    reached = _reached_imports()
    for name in ops.ACTIONS:
        assert ("http.client" in reached[name]) == ("http.client" in ops.warms(name, {})), name
    assert ops.warms("facts", {}) == [] and ops.warms("lock", {}) == []
    assert ops.warms("batch", {"calls": [{"call": "facts"}, {"call": "work"}]}) == ["http.client"]
    assert "http.client" not in transport_agent_warm()


def transport_agent_warm() -> tuple[str, ...]:
    """What every agent imports after its first answer (agent.WARM), read from its text."""
    tree = ast.parse(script_text("agent"))
    (found,) = (n.value for n in tree.body if isinstance(n, ast.Assign)
                and any(isinstance(t, ast.Name) and t.id == "WARM" for t in n.targets))
    return tuple(ast.literal_eval(found))


def test_what_an_in_agent_call_prints_stays_in_its_answer(
        agent: tuple[HostAgent, int]) -> None:
    """The agent's stdout is the controller's channel: a call in the agent prints into its
    own answer, as its fork would, and the next request is answered as ever."""
    host_agent, agent_pid = agent
    r = host_agent.call(MODULE, "mod.here_noisy", {}, 30)
    assert r.exit_code == 0
    assert r.stdout.startswith("noise on stdout\n") and r.stderr == "noise on stderr\n"
    assert json.loads(r.stdout.splitlines()[-1]) == {"pid": agent_pid}
    assert _report(host_agent, "here")["pid"] == agent_pid


def test_an_in_agent_call_that_raises_answers_as_its_fork_would(
        agent: tuple[HostAgent, int]) -> None:
    host_agent, agent_pid = agent
    here, forked = (host_agent.call(MODULE, f"mod.{name}", {}, 30)
                    for name in ("here_raises", "raises"))
    for r in (here, forked):
        assert r.exit_code == 1 and "RuntimeError: broken action" in r.stderr, r
        assert r.stdout == ""
    assert _report(host_agent, "here")["pid"] == agent_pid  # the agent lives on


def test_a_forked_call_still_times_out_and_is_killed(
        agent: tuple[HostAgent, int], tmp_path: Path) -> None:
    host_agent, agent_pid = agent
    pidfile = tmp_path / "pid"
    started = time.monotonic()
    r = host_agent.call(MODULE, "mod.sleeps", {"pidfile": str(pidfile)}, 1)
    assert r.exit_code == 124 and "timed out" in r.stderr
    assert time.monotonic() - started < 30
    child = int(pidfile.read_text())
    assert child != agent_pid
    assert not Path(f"/proc/{child}").exists()  # killed and reaped


HUGE = 1 << 40  # a sparse file's size: read whole, it fails at once or takes minutes
TRAP = "trap"  # what a string argument may say besides a path: a release id, a file name
FOLDERS = ("rollout", "releases", "staging")


def _path_names() -> set[str]:
    """Every plain name ops joins into a path (the constants of its os.path.join calls)."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(script_text("ops"))):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) \
                and node.func.attr == "join":
            found |= {c.value for arg in node.args for c in ast.walk(arg)
                      if isinstance(c, ast.Constant) and isinstance(c.value, str)}
    return {n for n in found if re.fullmatch(r"\.?\w[\w.-]*", n)}


NAMES = _path_names()


def _trap_root(root: Path, kind: str) -> Path:
    """A root where every file ops may open is a FIFO (kind "fifo", no writer: an open
    without O_NONBLOCK waits forever) or a HUGE sparse file: in the root, rollout/ and its
    staging/, releases/, and a release TRAP under each of these."""
    files = {n for n in NAMES if not n.startswith(".") and n not in FOLDERS}
    files |= {TRAP + n for n in NAMES if n.startswith(".")}
    for folder, has_trap in ((root, False), (root / "rollout", False),
                             (root / "rollout/staging", True), (root / "releases", True),
                             (root / "rollout/staging" / TRAP, False),
                             (root / "releases" / TRAP, False)):
        folder.mkdir(parents=True, exist_ok=True)
        for name in files if has_trap else files | {TRAP}:
            if kind == "fifo":
                os.mkfifo(folder / name)
            else:
                with open(folder / name, "wb") as f:
                    f.truncate(HUGE)
    return root


def _values(field: dict[str, object]) -> list[Callable[[Path], object]]:
    """What an argument may be, given a trap root: every string a path into the trap (the
    trap file, the root itself) or TRAP; a bool either; a number its default."""
    kind = field["type"]
    if kind in ("str", "[str]"):
        said: list[Callable[[Path], str]] = [lambda r: str(r / TRAP), str, lambda r: TRAP]
        return list(said) if kind == "str" else [lambda r, v=v: [v(r)] for v in said]
    if kind == "bool":
        return [lambda r: False, lambda r: True]
    return [lambda r: field.get("default", 1)]


def _high_water(pid: int) -> int:
    """The agent's peak resident memory, in KiB (VmHWM)."""
    line = next(x for x in Path(f"/proc/{pid}/status").read_text().splitlines()
                if x.startswith("VmHWM:"))
    return int(line.split()[1])


@pytest.mark.parametrize("kind", ["fifo", "sparse"])
@pytest.mark.parametrize("name", sorted(IN_AGENT))
def test_an_action_run_in_the_agent_never_holds_it(
        name: str, kind: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The rule of spec.IN_AGENT, by what each action does in the real agent: with every
    string argument naming a FIFO or a huge sparse file (and every file it may open under
    a root it is given one), each call answers within seconds, reads a bounded amount,
    and the agent answers the next call. A call that may wait is forked (and killed at
    its timeout); so is one that reads a folder the user configured outside rollout's
    root (param_cache, a marker, the config: a network mount may hang), by declaration."""
    monkeypatch.setattr(transport_agent, "ANSWER_SLACK", 4.0)
    command, stdin = transport_agent.agent_command()
    cwd = _trap_root(tmp_path / "cwd", kind)  # a relative path lands in a trap too
    p = subprocess.Popen(["sh", "-c", command], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                         cwd=cwd, env={**os.environ, "XDG_CACHE_HOME": str(tmp_path / "c")})
    assert p.stdin is not None
    p.stdin.write(stdin)
    p.stdin.flush()
    host_agent = HostAgent.start("here", PipeStream(p))
    assert host_agent is not None
    ops_source = script_text("ops")
    try:
        plain = {"root": str(tmp_path / "plain")}
        assert host_agent.call(ops_source, "ops.pointed", plain, 5).exit_code == 0
        before = _high_water(p.pid)
        fields = spec_of(name)["args"]
        for i, chosen in enumerate(itertools.product(*map(_values, fields.values()))):
            root = _trap_root(tmp_path / f"root{i}", kind)
            kwargs = {arg: value(root) for arg, value in zip(fields, chosen, strict=True)}
            started = time.monotonic()
            try:
                r = host_agent.call(ops_source, f"ops.{name}", kwargs, 1)
            except RolloutError as e:
                pytest.fail(f"ops.{name}({kwargs}) held the agent: {e}")
            assert time.monotonic() - started < 5, kwargs
            assert "MemoryError" not in r.stderr, kwargs
        assert _high_water(p.pid) - before < 64 << 10, "read an unbounded amount"
        assert host_agent.call(ops_source, "ops.pointed", plain, 5).exit_code == 0
    finally:
        with contextlib.suppress(OSError):
            p.stdin.close()
        p.kill()  # one held in a FIFO's open never reads its stdin's end
        p.wait()


def test_the_calls_that_can_hang_stay_forked() -> None:
    """in_agent is data on each action (spec.IN_AGENT), read by ops.in_agent: the calls that
    start a child, wait, lock or reach the network, or touch the user's own folders
    outside rollout's root, run in a forked child killed at its timeout."""
    for name in ("lock", "stop", "drain", "prove", "work", "cordon", "gpus", "ldd", "facts",
                 "wait_ready", "user_command", "file_sums", "install_release", "cpu_info",
                 "file_present", "params_probe", "pce_sizes", "make_folder",
                 "config_folders", "remove_files"):
        assert ops.in_agent(name, {}) is False, name
    assert {"pointed", "point_current", "identities", "cordoned"} <= IN_AGENT


def test_a_batch_runs_in_the_agent_only_where_each_of_its_calls_may() -> None:
    pure = [{"call": "pointed", "kwargs": {}}, {"call": "log_tail", "kwargs": {}}]
    assert ops.in_agent("batch", {"calls": pure}) is True
    for calls in ([*pure, {"call": "gpus"}], [*pure, "pointed"], [{"call": ["pointed"]}],
                  [{"call": "batch"}], None):
        assert ops.in_agent("batch", {"calls": calls}) is False, calls
    assert ops.in_agent("batch", None) is False


def _started(source: str, cache: Path,
             name: str = "probe.py") -> subprocess.CompletedProcess[bytes]:
    """A host script started as the guard and the agent are (python3 -c bootstrap(), the
    script sized on stdin, then its own stdin), its code cache in `cache`."""
    return subprocess.run([sys.executable, "-c", bootstrap(name)],
                          input=sized(source) + b"rest of stdin\n", capture_output=True,
                          env={**os.environ, "XDG_CACHE_HOME": str(cache)}, check=True)


def _cached(cache: Path, source: str) -> Path:
    sha = hashlib.sha256(source.encode()).hexdigest()
    (found,) = (cache / "rollout/code").glob(f"{sha}.*")
    return found


SCRIPT = "import sys\nprint(__name__, sys.stdin.read().strip())\n"


def test_a_script_started_on_stdin_is_compiled_once_per_host(tmp_path: Path) -> None:
    """The first start compiles and keeps the code (0600, in a 0700 folder); a second one
    takes it from the cache: here, a file sealed for the same source whose code says so."""
    cache = tmp_path / "cache"
    assert _started(SCRIPT, cache).stdout == b"__main__ rest of stdin\n"
    kept = _cached(cache, SCRIPT)
    assert kept.stat().st_mode & 0o777 == 0o600
    assert (cache / "rollout/code").stat().st_mode & 0o777 == 0o700
    scripts = Path(inspect.getfile(bootstrap)).parent
    subprocess.run(
        [sys.executable, "-c", "import sys, codecache as c\n"
         "c.store_code(sys.argv[1], compile(sys.argv[2], 'x', 'exec'))",
         hashlib.sha256(SCRIPT.encode()).hexdigest(), "print('taken from the cache')"],
        env={**os.environ, "XDG_CACHE_HOME": str(cache), "PYTHONPATH": str(scripts)},
        check=True)
    assert _started(SCRIPT, cache).stdout == b"taken from the cache\n"


@pytest.mark.parametrize("spoilt", ["a byte flipped", "another script's file", "a link",
                                    "not this user's folder"])
def test_a_cached_file_that_is_not_sealed_for_the_source_is_never_run(
        tmp_path: Path, spoilt: str) -> None:
    """A file whose seal does not match what it is named for (changed, or another script's
    code under this name), a link, or a cache folder others may write: compiled again from
    the source sent, and (but in a folder others may write) the cache file written again."""
    cache = tmp_path / "cache"
    _started(SCRIPT, cache)
    kept = _cached(cache, SCRIPT)
    other = "print('not the script sent')\n"
    _started(other, cache)
    elsewhere = _cached(cache, other)
    good = kept.read_bytes()
    if spoilt == "a byte flipped":
        kept.write_bytes(good[:-8] + bytes(b ^ 1 for b in good[-8:]))
    elif spoilt == "another script's file":
        os.replace(elsewhere, kept)
    elif spoilt == "a link":
        kept.unlink()
        kept.symlink_to(elsewhere)
    else:
        os.replace(elsewhere, kept)
        (cache / "rollout/code").chmod(0o777)
    assert _started(SCRIPT, cache).stdout == b"__main__ rest of stdin\n"
    if spoilt != "not this user's folder":
        assert not kept.is_symlink() and kept.read_bytes() == good  # rebuilt
    (cache / "rollout/code").chmod(0o700)


def test_the_agent_and_the_guard_start_through_the_code_cache() -> None:
    assert bootstrap("guard.py") == engine_guard.BOOTSTRAP
    assert bootstrap("agent.py") == transport_agent.BOOTSTRAP
    assert "run_sized" in bootstrap("guard.py") and "'" not in bootstrap("guard.py")
    with pytest.raises(ValueError):
        bootstrap("x.py; rm -rf /")
