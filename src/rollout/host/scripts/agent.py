"""rollout agent: one warm Python on the host that runs a connection's commands.

The controller starts it once per connection, on a session channel of its own:

    python3 -c BOOTSTRAP   (stdin: the script's length, this script, then requests)

and sends each command as one JSON line; the answer is one JSON line. A request is data:

    {"id": 1, "sh": "COMMAND", "stdin": "TEXT", "timeout": 30}
    {"id": 2, "script": "guard", "sha": "HEX", "source": "...", "args": [...], "before": "CMD"}
    {"id": 3, "call": "ops.stop", "kwargs": {...}, "sha": "HEX", "source": "...", "timeout": 30}

A shell command runs as `sh -c COMMAND`, its stdin fed from "stdin", as the session's own
exec channel would run it. A host script (rollout.host.scripts) runs in a forked child of
this process, as `python3 - ARGS` with the script on its stdin would: sys.argv is
["-", *args], its stdin is empty, __name__ is "__main__", its exit status is its
answer's. The child skips what each `python3 -` paid for again: the interpreter's start,
compiling the script (compiled once per connection, by its sha256; "source" is sent only
when asked for) and importing the standard modules most scripts use (imported here, once).
"before" is a shell command run first; the script runs only when it exits 0, as
`before && python3 -`.
A call runs one function of a host module (ops.py, rollout's host API) in a forked child:
the module (compiled once per connection, by its sha256, like a script) is run once in the
agent as a module of that name, the function called with the keyword arguments; its report,
one JSON line, is the answer's stdout. A call the module's in_agent() allows (an action
declared in_agent: it starts no child, sends no signal and waits on nothing) runs in the
agent itself, answered the same way: no fork (about 8 ms of a loaded host's CPU per call).

What it compiles it keeps in the host's code cache (codecache.py, which also starts this
script and the guard), so a later connection needs neither the source nor the compiling: a
request names its script by sha256 alone, and "unknown" (not compiled here, nor cached)
asks the controller for the source.

Each command but an in-agent call is a process group of its own; at its timeout the group
is killed and the answer says so (exit 124, "timed_out"). The agent ends when its stdin does: the
controller closed the channel, or its connection is gone.
Standard library only; python3 >= 3.9.
"""

from __future__ import annotations

import contextlib
import fcntl  # noqa: F401 - for the forked scripts (lock, guard): each finds it loaded
import hashlib
import io
import json
import os
import select
import signal
import subprocess
import sys
import time
import types
from typing import Any

# isort: off
from rollout.host.scripts.codecache import load_code, store_code  # inlined on hosts
# isort: on

# What the agent imports, every script it forks finds loaded. Not urllib.request (as much
# again as all of these): the agents of a whole fleet start at once while the run takes its
# locks, and only the proof (once per host) uses it.

WARM = ("urllib.parse", "socket", "shutil", "platform", "secrets")
"""Imported by the agent once its first request (the lock's take) is answered, before the
second: every later call forks with them loaded. The facts, the guard, the lock and the
calls that read /status import them, about 10 ms of a host's CPU each time in a fresh
fork. The costly one, http.client (about 30 ms), only the calls that read /status use
(work, the cordon's look, ready, validate's probe and proof): each declares it (its
module's warms()), and the agent imports it before it forks the first of them."""

MAX_OUTPUT = 16 << 20  # bytes of a command's stdout or stderr: past it, the answer is refused
ANSWER_CAP = 16 << 20  # bytes of one answer line, as the controller caps it
KILL_WAIT = 5.0  # seconds to collect what a killed command's group said


def _pump(pid: int, feed: bytes, stdin_fd: int | None, out_fd: int, err_fd: int,
          deadline: float | None) -> tuple[bytes, bytes, bool, str | None]:
    """Feed stdin, read stdout and stderr until both end; (stdout, stderr, timed out, the
    stream that went past MAX_OUTPUT or None).
    At the deadline the process group `pid` is killed and what it said is kept."""
    out, err = bytearray(), bytearray()
    reading = {out_fd: out, err_fd: err}
    over: list[str] = []
    writing = stdin_fd
    timed_out = False
    view = memoryview(feed)
    if writing is not None and not view:
        os.close(writing)
        writing = None
    while reading:
        left = None if deadline is None else deadline - time.monotonic()
        if left is not None and left <= 0:
            if timed_out:
                break
            timed_out = True
            with contextlib.suppress(OSError):
                os.killpg(pid, signal.SIGKILL)
            deadline = time.monotonic() + KILL_WAIT
            continue
        wants = [writing] if writing is not None else []
        readable, writable, _ = select.select(list(reading), wants, [], left)
        if writable:
            try:
                sent = os.write(writing, view[:65536])  # type: ignore[arg-type]
            except OSError:  # it stopped reading its stdin: not an error
                sent = len(view)
            view = view[sent:]
            if not view:
                os.close(writing)  # type: ignore[arg-type]
                writing = None
        for fd in readable:
            chunk = os.read(fd, 65536)
            if not chunk:
                del reading[fd]
                continue
            if len(reading[fd]) <= MAX_OUTPUT:
                reading[fd] += chunk
            elif not over:  # kept reading (the command must not block), never kept
                over.append("stdout" if fd == out_fd else "stderr")
    for left_open in (out_fd, err_fd, writing):
        if left_open is not None:
            with contextlib.suppress(OSError):
                os.close(left_open)
    return bytes(out), bytes(err), timed_out, over[0] if over else None


def _wait(pid: int, timed_out: bool) -> int:
    if timed_out:
        with contextlib.suppress(OSError):
            os.killpg(pid, signal.SIGKILL)
    _, status = os.waitpid(pid, 0)
    if timed_out:
        return 124
    return os.WEXITSTATUS(status) if os.WIFEXITED(status) else -1  # a signal: as SSH says it


def run_shell(command: str, feed: bytes, timeout: float | None) -> dict[str, Any]:
    started = time.monotonic()
    p = subprocess.Popen(["sh", "-c", command], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, preexec_fn=os.setpgrp, close_fds=True)
    assert p.stdin and p.stdout and p.stderr
    fds = (os.dup(p.stdin.fileno()), os.dup(p.stdout.fileno()), os.dup(p.stderr.fileno()))
    for f in (p.stdin, p.stdout, p.stderr):
        f.close()
    deadline = None if timeout is None else started + timeout
    out, err, timed_out, over = _pump(p.pid, feed, fds[0], fds[1], fds[2], deadline)
    code = _wait(p.pid, timed_out)
    p.returncode = code  # reaped above: Popen must not wait for it again
    return _done(code, out, err, timed_out, over)


def _done(code: int, out: bytes, err: bytes, timed_out: bool,
          over: str | None) -> dict[str, Any]:
    """A command's answer; "oversized" (and nothing it said) when its output went past
    MAX_OUTPUT: the controller refuses it."""
    if over:
        return {"oversized": f"{over} over {MAX_OUTPUT} bytes"}
    return {"exit": code, "stdout": out, "stderr": err, "timed_out": timed_out}


def _child(code: types.CodeType, args: list[str], out_w: int, err_w: int) -> None:
    """In the forked child: become `python3 - ARGS` running the script, then exit."""
    def body() -> None:
        sys.argv = ["-", *args]
        module = types.ModuleType("__main__")
        module.__file__ = "<stdin>"
        sys.modules["__main__"] = module
        exec(code, module.__dict__)  # noqa: S102 - a rollout host script, sent by the controller

    _as_child(body, out_w, err_w)


_LOADED: dict[types.CodeType, types.ModuleType] = {}
"""Host modules run once in the agent (by their code): each call's fork finds its module
loaded, where running a module of ~100 actions in every fork cost the host's CPU each call."""


def _module(code: types.CodeType, name: str) -> tuple[types.ModuleType, bool]:
    """The module `code` makes, run here once and kept (True); a module that fails to load
    here is a fresh one (False), for the child to run and report its error as before."""
    module = _LOADED.get(code)
    if module is not None:
        return module, True
    module = types.ModuleType(name)
    module.__file__ = f"<{name}>"
    try:
        exec(code, module.__dict__)  # noqa: S102 - rollout's host module, sent by the controller
    except BaseException:  # noqa: BLE001 - the child runs it again and says what failed
        fresh = types.ModuleType(name)
        fresh.__file__ = module.__file__
        return fresh, False
    _LOADED[code] = module
    return module, True


def _call_child(code: types.CodeType, call: str, kwargs: dict[str, Any], out_w: int,
                err_w: int) -> None:
    """In the forked child: the module (loaded in the agent, else run now), the function
    called, its report printed."""
    module_name, _, function = call.partition(".")
    module, loaded = _module(code, module_name)
    sys.modules[module_name] = module

    def body() -> None:
        if not loaded:
            exec(code, module.__dict__)  # noqa: S102 - rollout's host module, from the controller
        dispatch = getattr(module, "call", None)
        if not callable(dispatch):
            raise SystemExit(f"agent: module {module_name} has no call()")
        report = dispatch(function, kwargs)
        sys.stdout.write(json.dumps(report, sort_keys=True, default=str) + "\n")

    _as_child(body, out_w, err_w)


def _as_child(body: Any, out_w: int, err_w: int) -> None:
    """Run body() as the forked child's whole life: its own group, stdin /dev/null, stdout
    and stderr to the pipes; exit with its status, as python3 would."""
    status: Any = 0
    try:
        os.setpgid(0, 0)
        os.dup2(os.open(os.devnull, os.O_RDONLY), 0)
        os.dup2(out_w, 1)
        os.dup2(err_w, 2)
        os.closerange(3, 65536)
        sys.stdin = open(0, closefd=False)  # noqa: SIM115 - fd 0, /dev/null now
        body()
    except SystemExit as e:
        status = e.code
    except BaseException:  # noqa: BLE001 - reported as python3 would, exit 1
        import traceback  # here: only a call that raised needs it

        traceback.print_exc()
        status = 1
    if status is None:
        status = 0
    elif not isinstance(status, int):
        sys.stderr.write(f"{status}\n")
        status = 1
    try:
        sys.stdout.flush()
        sys.stderr.flush()
    finally:
        os._exit(status & 0xFF)


def run_call(code: types.CodeType, call: str, kwargs: dict[str, Any],
             timeout: float | None) -> dict[str, Any]:
    """A call in a forked child (loaded before the fork, for every later call); in this
    process where its module says the action may run here (its in_agent())."""
    module_name, _, function = call.partition(".")
    module, loaded = _module(code, module_name)
    if loaded and _here(module, function, kwargs):
        return run_here(module, function, kwargs)
    if loaded:
        _warm_for(module, function, kwargs)
    return _forked(lambda out_w, err_w: _call_child(code, call, kwargs, out_w, err_w), timeout)


def _here(module: types.ModuleType, function: str, kwargs: dict[str, Any]) -> bool:
    """The module's in_agent(function, kwargs) (ops.in_agent: declared as data on the
    action); False where it has none, or it fails."""
    ask = getattr(module, "in_agent", None)
    try:
        return callable(ask) and ask(function, kwargs) is True
    except Exception:  # noqa: BLE001 - forked, as any call
        return False


def _warm_for(module: types.ModuleType, function: str, kwargs: dict[str, Any]) -> None:
    """Import the modules the call's module says it needs (its warms(): ops declares them
    per action), here, before its fork: once per agent, for every later fork too."""
    ask = getattr(module, "warms", None)
    try:
        names = ask(function, kwargs) if callable(ask) else []
    except Exception:  # noqa: BLE001 - its fork imports what it needs
        return
    for name in names if isinstance(names, list) else []:
        if isinstance(name, str) and name not in sys.modules:
            with contextlib.suppress(Exception):
                __import__(name)


def run_here(module: types.ModuleType, function: str,
             kwargs: dict[str, Any]) -> dict[str, Any]:
    """A call in this process, answered as its forked child would be: the report on stdout,
    exit 0; a traceback and exit 1 where it raised. Its stdin is empty and what it prints is
    kept, never written to the controller's channel."""
    out, err = io.StringIO(), io.StringIO()
    status: Any = 0
    stdin, sys.stdin = sys.stdin, io.StringIO()
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                report = module.call(function, kwargs)
                out.write(json.dumps(report, sort_keys=True, default=str) + "\n")
            except SystemExit as e:
                status = e.code
            except Exception:  # noqa: BLE001 - reported as its child would, exit 1
                import traceback  # here: only a call that raised needs it

                traceback.print_exc()
                status = 1
    finally:
        sys.stdin = stdin
    if status is None:
        status = 0
    elif not isinstance(status, int):
        err.write(f"{status}\n")
        status = 1
    said = {"stdout": out.getvalue().encode(), "stderr": err.getvalue().encode()}
    over = next((n for n, b in said.items() if len(b) > MAX_OUTPUT), None)
    return _done(status & 0xFF, said["stdout"], said["stderr"], False, over)


def run_script(code: types.CodeType, args: list[str], timeout: float | None) -> dict[str, Any]:
    """The script in a forked child, its stdin /dev/null."""
    return _forked(lambda out_w, err_w: _child(code, args, out_w, err_w), timeout)


def _forked(child: Any, timeout: float | None) -> dict[str, Any]:
    started = time.monotonic()
    out_r, out_w = os.pipe()
    err_r, err_w = os.pipe()
    sys.stdout.flush()
    sys.stderr.flush()
    pid = os.fork()
    if pid == 0:
        os.close(out_r)
        os.close(err_r)
        child(out_w, err_w)
    os.close(out_w)
    os.close(err_w)
    with contextlib.suppress(OSError):
        os.setpgid(pid, pid)  # also here: no race with a kill before the child set it
    deadline = None if timeout is None else started + timeout
    out, err, timed_out, over = _pump(pid, b"", None, out_r, err_r, deadline)
    return _done(_wait(pid, timed_out), out, err, timed_out, over)


def warm() -> None:
    """Import WARM (a module the host lacks is left to the script that needs it)."""
    for name in WARM:
        with contextlib.suppress(ImportError):
            __import__(name)


class Agent:
    def __init__(self) -> None:
        self.compiled: dict[str, types.CodeType] = {}
        self.answered = 0

    def handle(self, req: dict[str, Any]) -> dict[str, Any]:
        if self.answered == 1:  # after the first answer (the lock's), off its path
            warm()
        self.answered += 1
        timeout = req.get("timeout")
        timeout = float(timeout) if isinstance(timeout, (int, float)) and timeout > 0 else None
        if isinstance(req.get("sh"), str):
            feed = str(req.get("stdin") or "").encode()
            return run_shell(req["sh"], feed, timeout)
        code = self.code(req)
        if isinstance(code, dict):
            return code
        if isinstance(req.get("call"), str):
            kwargs = req.get("kwargs")
            if not isinstance(kwargs, dict):
                return {"exit": 2, "stdout": b"", "stderr": b"agent: kwargs is no object\n",
                        "timed_out": False}
            return run_call(code, req["call"], kwargs, timeout)
        started = time.monotonic()
        before = req.get("before")
        first: dict[str, Any] = {"stdout": b"", "stderr": b""}
        if isinstance(before, str) and before:
            first = run_shell(before, b"", timeout)
            if first.get("exit") != 0:
                return first
            if timeout is not None:
                timeout = max(0.001, timeout - (time.monotonic() - started))
        args = [str(a) for a in req.get("args") or []]
        import argparse  # noqa: F401 - each host script parses its arguments with it: loaded
        # once here, before the first script's fork (a call never needs it)
        done = run_script(code, args, timeout)
        if "oversized" not in done:
            done["stdout"] = first["stdout"] + done["stdout"]
            done["stderr"] = first["stderr"] + done["stderr"]
        return done


    def code(self, req: dict[str, Any]) -> types.CodeType | dict[str, Any]:
        """The request's script or module, compiled once by its sha256 (an answer instead
        where it cannot be had: "unknown" asks the controller for its source)."""
        sha = str(req.get("sha") or "")
        code = self.compiled.get(sha)
        if code is not None:
            return code
        source = req.get("source")
        if not isinstance(source, str):
            code = load_code(sha)
            if code is None:
                return {"unknown": sha}
            self.compiled[sha] = code
            return code
        if hashlib.sha256(source.encode()).hexdigest() != sha:
            return {"exit": 2, "stdout": b"", "stderr": b"agent: script sha256 mismatch\n",
                    "timed_out": False}
        code = self.compiled[sha] = compile(source, "<stdin>", "exec", dont_inherit=True)
        store_code(sha, code)
        return code


def answer(req_id: Any, result: dict[str, Any]) -> str:
    out = {k: (v.decode("utf-8", "replace") if isinstance(v, bytes) else v)
           for k, v in result.items()}
    if out.get("oversized"):
        return json.dumps({"id": req_id, "oversized": out["oversized"]}) + "\n"
    line = json.dumps({"id": req_id, **out}) + "\n"
    if len(line) > ANSWER_CAP:  # escapes (\uXXXX) make a line longer than its output
        return json.dumps({"id": req_id, "oversized": len(line)}) + "\n"
    return line


def serve(stdin: Any, stdout: Any) -> int:
    agent = Agent()
    stdout.write(json.dumps({"agent": os.getpid()}) + "\n")
    stdout.flush()
    for raw in iter(stdin.readline, b""):
        try:
            req = json.loads(raw.decode("utf-8"))
        except ValueError:
            continue
        if not isinstance(req, dict):
            continue
        try:
            result = agent.handle(req)
        except Exception as e:  # noqa: BLE001 - the controller gets the reason, the agent lives
            result = {"exit": 255, "stdout": b"", "stderr": f"agent: {type(e).__name__}: {e}\n",
                      "timed_out": False}
        stdout.write(answer(req.get("id"), result))
        stdout.flush()
    return 0


def main(argv: list[str]) -> int:
    if argv:  # --help; the controller starts the agent with no argument (argparse: 2 ms)
        import argparse

        argparse.ArgumentParser(
            description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
        ).parse_args(argv)
    return serve(sys.stdin.buffer, sys.stdout)


def leave(code: int) -> None:
    """End the agent once its stdin has: its answers are flushed and its children reaped,
    so the interpreter's teardown (freeing every module ops and WARM loaded, about 5 ms
    of a host's CPU each connection) would do nothing anyone sees."""
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


if __name__ == "__main__":
    leave(main(sys.argv[1:]))
