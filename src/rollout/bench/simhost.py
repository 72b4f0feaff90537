"""A simulated host behind the Transport interface: the engine's unit tests run against it
(tests/unit/fakehost.py re-exports it), and so does `inv bench --simulate N` (simulate.py),
one implementation for both. It serves facts from a small scripted state, answers the host
calls the steps make (ops.py's actions: a dict in, a report out), records every call and
command, and fails where told.

What it simulates: the hold, current and the previous release, the releases and files
on the host (by sha256: a file's identity is "id-" and its digest), the daemon (the
release it runs, its pid, a stranger on its ports), the supervisor, the cordon record and
the validation evidence. Each call is checked as ops.call checks it (ops.misfit), gets the
action's declared defaults, and its answer is checked against the action's declared report
shape (ops.SPECS): a simulated host that answers as the real host cannot raises
AssertionError. An action with nothing to simulate answers from its declaration alone
(CANNED).

The wire (`Wire`): each round trip (a call, a command, a put) sleeps its latency, and a
put its bytes over the bandwidth (sleeps release the GIL: hosts wait in parallel, as real
ones do), and loses the session at the failure rate, drawn from the host's own seeded
random. Zero latency, no bandwidth limit and no failures unless set.

What still arrives as a command line is what rollout still writes as one
(docs/architecture.md): the guard's `--left` read (`python3 - ARGS`, the guard script on
stdin) and the base transport's upload (put_and_digest: `mkdir -p`, `chmod`, `sha256sum`).
Any other command line is refused (AssertionError): a step that writes shell text of its
own fails here.

No Docker, no SSH, no network, no root: in-process only.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import random
import re
import shlex
import threading
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from rollout.host.scripts import ops
from rollout.host.scripts.actions.base import _release_id_ok
from rollout.host.scripts.actions.spec import fits, misfit, type_of
from rollout.host.scripts.common import proof_verdict
from rollout.transport.base import LocalFile, RunResult, Transport, local_size, opened
from rollout.transport.failures import lost

ROOT = "/data"
CURRENT = f"{ROOT}/current"
RELEASES = f"{ROOT}/releases"
STAGING = f"{ROOT}/rollout/staging"


def sha(data: bytes | str) -> str:
    return hashlib.sha256(data.encode() if isinstance(data, str) else data).hexdigest()


SPECS: dict[str, Any] = ops.SPECS
CANNED = {"make_folder": "kept", "config_folders": "kept", "log_tail": "read",
          "cpu_info": "none", "gpus": "ran", "ldd": "read", "file_present": "present",
          "register": "none", "check_root": "clean"}
"""The actions this host answers with one outcome word and nothing read (every folder is
there, no CPU flags listed, no GPU, libraries all found, no start-up mechanism)."""
_ZERO = {"str": "", "int": 0, "float": 0.0, "bool": False, "obj": {}, "list": [], "any": None}


def canned(action: str, outcome: str) -> dict[str, Any]:
    """A report of the action's declared shape: the outcome word, each declared key empty."""
    data = {k: None if f["none"] else [] if f["type"][0] == "[" else {} if f["type"][0] == "{"
            else _ZERO[f["type"]] for k, f in SPECS[action]["returns"].items()}
    return _report(outcome, f"{action}: {outcome} (the fake host)", **data)


def shape_problem(action: str, report: Any) -> str | None:
    """Why a report does not have its action's declared shape (None: it has): an outcome
    word it does not declare, a key it does not declare, a value not of the declared type."""
    spec = SPECS[action]
    if not isinstance(report, dict):
        return f"not an object: {report!r}"
    if spec["outcomes"] and report.get("outcome") not in spec["outcomes"]:
        return f"outcome {report.get('outcome')!r} is not one of {spec['outcomes']}"
    for key, value in report.items():
        if key in ("outcome", "reason"):
            if not isinstance(value, str):
                return f"{key} is not a string"
            continue
        field = spec["returns"].get(key)
        if field is None:
            return f"undeclared key {key!r}"
        if not fits(value, type_of(field)):
            return f"{key}={value!r} is not {type_of(field)}"
    return None


def bad_call(action: str, kwargs: Mapping[str, Any]) -> dict[str, Any] | None:
    """ops.call's own check: an unknown action or arguments that do not fit it."""
    fn = ops.ACTIONS.get(action)
    if fn is None:
        return {"outcome": "bad-call", "reason": f"no host action {action[:80]!r}"}
    why = misfit(fn, dict(kwargs))
    return None if why is None else {"outcome": "bad-call", "reason": f"{action}: {why}"}


@dataclass(frozen=True)
class Wire:
    """What the network does to each round trip between the controller and a host."""

    latency: float = 0.0  # seconds per round trip: a call, a command, a put
    bandwidth: float = 0.0  # bytes per second of what a round trip carries; 0: no limit
    failure_rate: float = 0.0  # the share of round trips that lose the session (0 to 1)
    seed: int = 0  # each host draws its failures from Random(f"{seed}:{name}")


class Flight:
    """Hosts with a round trip under way, counted across a fleet: now and at the peak."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._hosts: dict[str, int] = {}  # host: its round trips under way
        self.peak = 0

    @contextlib.contextmanager
    def trip(self, host: str) -> Iterator[None]:
        with self._lock:
            self._hosts[host] = self._hosts.get(host, 0) + 1
            self.peak = max(self.peak, len(self._hosts))
        try:
            yield
        finally:
            with self._lock:
                self._hosts[host] -= 1
                if not self._hosts[host]:
                    del self._hosts[host]


@dataclass
class SimHost(Transport):
    """One host's state. `faults` names what goes wrong: a step kind, or `prune`; `wire`:
    what each round trip costs and how often it fails; `flight`: the fleet's count of hosts
    with a round trip under way."""

    name: str
    current: str | None = None
    previous: str | None = None
    releases: dict[str, dict[str, str]] = field(default_factory=dict)  # id: {name: sha256}
    files: dict[str, str] = field(default_factory=dict)  # path: sha256
    daemon: str | None = None  # the release the daemon runs
    held: bool = False
    supervisor: bool = False
    faults: set[str] = field(default_factory=set)
    bad_release: str | None = None  # start, ready and validate faults hit only this release
    sent: list[str] = field(default_factory=list)
    uploads: dict[str, str] = field(default_factory=dict)  # remote path: sha256
    pid: int = 100
    stranger: int | None = None  # a process that is not ours holding the daemon's ports
    validated: Any = None  # <state>/validated.json as the controller wrote it (parsed)
    cordoned: str | None = None  # the run that cordoned the host (<state>/cordoned.json)
    locked_by: str | None = None  # the run whose lock is on the host
    wire: Wire = field(default_factory=lambda: Wire())
    flight: Flight = field(default_factory=lambda: Flight())
    busy: float = 0.0  # seconds this host spent on the wire (its latency and its bytes)
    cpu: float = 0.0  # CPU seconds spent answering as this host (not the controller's)

    def __post_init__(self) -> None:
        self._random = random.Random(f"{self.wire.seed}:{self.name}")

    # ---------------------------------------------------------------- Transport

    def run(self, command: str, timeout: float | None = None, stdin: str | None = None
            ) -> RunResult:
        self.sent.append(command)
        self._trip(command.split(" ", 1)[0], len(stdin or ""))
        started = time.thread_time()
        code, out = self._answer(command, stdin or "")
        self.cpu += time.thread_time() - started
        return RunResult(command, code, out, "" if code == 0 else out)

    def call(self, source: str, call: str, kwargs: Mapping[str, Any],
             timeout: float | None = None) -> RunResult:
        """A host action of ops.py: a dict in, its report out (one JSON line); arguments
        ops.py's function does not take: "bad-call", as ops.call says it."""
        self.sent.append(f"call {call} {json.dumps(dict(kwargs), sort_keys=True)}")
        self._trip(call, 0)
        started = time.thread_time()
        report = self._answered(call.removeprefix("ops."), kwargs)
        answer = json.dumps(report) + "\n"
        self.cpu += time.thread_time() - started
        return RunResult(f"call {call}", 0, answer, "")

    def _answered(self, action: str, kwargs: Mapping[str, Any]) -> dict[str, Any]:
        """ops.call's check of the arguments, the action's defaults filled in as ops.py's
        function has them, then this host's answer: checked against the action's declared
        report shape (an answer the real host cannot give fails the test)."""
        refused = bad_call(action, kwargs)
        if refused:
            return refused
        args = {n: f["default"] for n, f in SPECS[action]["args"].items() if not f["required"]}
        handler = getattr(self, f"_op_{action}", None)
        report = handler(**{**args, **kwargs}) if handler else canned(action, CANNED[action])
        problem = shape_problem(action, report)
        if problem is not None:
            raise AssertionError(f"the simulated host's {action} answer: {problem}")
        return report

    def put(self, local_path: LocalFile, remote_path: str, resume: bool = False,
            progress: Any = None) -> None:
        self.sent.append(f"put {remote_path}")
        self._trip(f"put {remote_path}", local_size(local_path))
        started = time.thread_time()
        with opened(local_path) as f:
            self.uploads[remote_path] = self.files[remote_path] = sha(f.read())
        self.cpu += time.thread_time() - started

    def get(self, remote_path: str, local_path: str) -> None:
        raise NotImplementedError

    def _trip(self, what: str, size: int) -> None:
        """One round trip over the wire: counted in flight, its latency and its bytes slept
        (the host's own time, in `busy`), or the session lost at the failure rate."""
        wire = self.wire
        with self.flight.trip(self.name):
            if wire.failure_rate and self._random.random() < wire.failure_rate:
                raise lost(self.name, what[:60], why="simulated: the wire's failure rate")
            seconds = wire.latency + (size / wire.bandwidth if wire.bandwidth else 0.0)
            if seconds > 0:
                time.sleep(seconds)
            self.busy += seconds

    # ---------------------------------------------------------------- ops.py, as this host does it
    # Each answers as the ops.py function of the same name would, from this host's state;
    # _answered() checks its arguments and its answer against the action's declaration.

    def _op_batch(self, calls: list[Any]) -> dict[str, Any]:
        """ops.batch: each call answered as on its own (recorded as sent, as ops.py runs it)."""
        reports = []
        for entry in calls:
            action, kwargs = entry["call"], json.dumps(entry["kwargs"], sort_keys=True)
            self.sent.append(f"batched {action} {kwargs}")
            reports.append(self._answered(action, entry["kwargs"]))
        return _report("batch", f"{len(reports)} call(s)", reports=reports)

    def _op_hold(self, root: str) -> dict[str, Any]:
        was, self.held = self.held, True
        return _report("kept", "hold already set") if was else _report("set", "hold set")

    def _op_release_hold(self, root: str) -> dict[str, Any]:
        was, self.held = self.held, False
        return _report("released", "hold released") if was else _report(
            "none", "no hold was set")

    def _op_stop(self, root: str, signal: str, set_hold: bool, adopt_pid: int,
                 adopt_starttime: int | None, keep_release: str | None, **_: Any
                 ) -> dict[str, Any]:
        if keep_release and self.daemon == keep_release:
            return _report("kept", f"daemon {self.pid} runs release {keep_release}: kept",
                           pid=self.pid, starttime=1)
        held = self._op_hold(root)["outcome"] == "set" if set_hold else False
        if adopt_pid:
            out = _report("stopped", f"daemon {adopt_pid} stopped ({signal})", pid=adopt_pid,
                          starttime=adopt_starttime, adopted=True, signal=signal,
                          state="gone")
        else:
            out = self._stop(signal)
        return {**out, "held": held}

    def _stop(self, signal: str) -> dict[str, Any]:
        if self.daemon is None:
            return _report("none", "no daemon pidfile: nothing to stop")
        ours = {"pid": self.pid, "starttime": 1, "exe": f"{RELEASES}/{self.daemon}/cuzk-daemon",
                "signal": signal}
        if "stop" in self.faults:
            self.faults.discard("stop")  # it survives once: the rollback's forced stop works
            return _report("still-running", f"daemon {self.pid} survived {signal} and SIGKILL",
                           escalated=True, state="running", **ours)
        self.daemon = None
        return _report("stopped", f"daemon {self.pid} stopped ({signal})", state="gone",
                       **ours)

    def _op_work(self, status_url: str, **_: Any) -> dict[str, Any]:
        if self.daemon is None:
            return _report("no-answer", "no daemon runs and nothing answered", jobs=[],
                           queue_depth=None, working_bytes=None,
                           signals={"status": "none", "grpc": "none", "memory": "none"})
        return _report("idle", "no job in flight, queue empty", jobs=[], queue_depth=0,
                       working_bytes=0,
                       signals={"status": "idle", "grpc": "none", "memory": "idle"})

    def _op_cordon(self, run_id: str, status_url: str, **_: Any) -> dict[str, Any]:
        self.cordoned = run_id  # the record first, then the command, then the first look
        looked = {"work": self._op_work(status_url)} if status_url else {}
        return _report("cordoned", "cordon command exited 0", exit=0, output="", **looked)

    def _op_uncordon(self, **_: Any) -> dict[str, Any]:
        if self.cordoned is None:
            return _report("none", "not cordoned by rollout: nothing to undo")
        self.cordoned = None
        return _report("uncordoned", "uncordon command exited 0", exit=0, output="",
                       record_removed=True)

    def _op_point_current(self, root: str, release: str) -> dict[str, Any]:
        before = self.current
        if not _release_id_ok(release):
            return _report("refused", f"not a release id: {release[:80]!r}")
        if release == before:
            return _report("kept", f"current already points at {release}", previous=before)
        if release not in self.releases:
            return _report("missing", f"release {release} is not on the host", previous=before)
        self.current = release
        return _report("pointed", f"current: {before or 'none'} -> {release}", previous=before)

    def _op_restore_config(self, config_path: str, kept_config: str) -> dict[str, Any]:
        if kept_config not in self.files:
            return _report("none", f"no kept config at {kept_config}")
        if self.files.get(config_path) == self.files[kept_config]:
            return _report("kept", f"{config_path} already holds the kept config")
        self.files[config_path] = self.files[kept_config]
        return _report("restored", f"restored {config_path} from {kept_config}")

    def _op_run_supervisor(self, restart: bool, **_: Any) -> dict[str, Any]:
        self.supervisor = True
        return _report("restarted", "supervisor restarted") if restart else _report(
            "started", "supervisor started")

    def _op_start(self, root: str, wait: float, **_: Any) -> dict[str, Any]:
        release = self.current
        if release is None or release not in self.releases:
            return _report("no-release", f"{root}/current does not point at a release")
        released = self._op_release_hold(root)["outcome"] == "released"
        self.supervisor = True
        if self._bad("start"):
            return _report("not-started", f"the supervisor did not start the daemon of "
                           f"{release} within {wait:g}s", release=release, released=released)
        word = "running" if self.daemon == release else "started"
        if word == "started":
            self.daemon = release
            self.pid += 1  # a new process: a new pid
        line = f"{self.pid} 1 {RELEASES}/{release}/cuzk-daemon"
        return _report(word, f"daemon {self.pid} {word} {release}", pid=self.pid, starttime=1,
                       release=release, released=released, pidline=line)

    def _op_wait_ready(self, status_url: str, seconds: float, ports: list[int] | None,
                       pid: int | None, **_: Any) -> dict[str, Any]:
        if self._bad("ready"):
            self.daemon = None
            return _report("died", f"daemon {self.pid} died during start-up", pid=self.pid)
        if self.daemon is None:
            return _report("timeout", f"status port {status_url} did not answer within "
                           f"{seconds:g}s")
        return _report("ready", f"{status_url} answered", answer=self._status(),
                       owners=self._ports(list(ports or []), pid))

    def _op_prove(self, command: str, evidence: str, record: str, pattern: str, **_: Any
                  ) -> dict[str, Any]:
        """The proof passes unless a validate fault hits; the evidence of an earlier
        validation goes first, and `record` is written only where the output passes
        proof_verdict (as ops.prove)."""
        if not command.strip():
            return _report("no-command", "no validation command")
        if evidence:
            self.files.pop(evidence, None)
            self.validated = None
        out = "=== Proof Result ===\nstatus:    FAILED\nerror:     bad proof\n" \
            if self._bad("validate") else "=== Proof Result ===\njob_id: 7\nstatus:    COMPLETED\n"
        passed, why = proof_verdict(out, pattern) if pattern else (False, "no pattern")
        recorded = bool(evidence and record and passed)
        if recorded:
            self.files[evidence] = sha(record + "\n")
            self.validated = json.loads(record)
        return _report("ran", "the proof exited 0", exit=0, elapsed=0.1, stdout=out,
                       stderr="", status_after=None, recorded=recorded, passed=passed,
                       verdict=why)

    def _op_prune(self, releases: list[str], keep: list[str] | None, **_: Any
                  ) -> dict[str, Any]:
        protected = set(keep or []) | {self.current or ""}
        kept = [r for r in releases if r in protected or not _release_id_ok(r)]
        if "prune" in self.faults and self.current == self.bad_release:
            return _report("failed", "could not remove x: Read-only file system", removed=[],
                           kept=kept)
        removed = [r for r in releases if r not in kept and r in self.releases]
        for release in removed:
            del self.releases[release]
        if not removed:
            return _report("none", "no release to remove", kept=kept)
        return _report("pruned", f"removed {len(removed)} release(s)", removed=removed,
                       kept=kept)

    def _op_remove_partial(self, name: str, **_: Any) -> dict[str, Any]:
        if not name.startswith(".partial-") or "/" in name or name == ".partial-":
            return _report("refused", f"not an upload's partial folder: {name[:80]!r}")
        if not self._drop(f"{RELEASES}/{name}"):
            return _report("none", f"no {name} to remove")
        return _report("removed", f"removed {name}")

    def _op_pointed(self, **_: Any) -> dict[str, Any]:
        return _report("pointed" if self.current else "none",
                       f"current: {self.current or 'none'}", current=self.current,
                       previous=self.previous)

    def _op_remove_files(self, paths: list[str]) -> dict[str, Any]:
        removed = [p for p in paths if self.files.pop(p, None) is not None]
        return _report("removed" if removed else "none", f"removed {len(removed)} file(s)",
                       removed=removed)

    def _op_write_file(self, path: str, text: str, keep: str | None,
                       if_changed: bool) -> dict[str, Any]:
        if if_changed and self.files.get(path) == sha(text):
            return _report("unchanged", path, ok=True, changed=False)
        if keep and path in self.files:
            self.files[keep] = self.files[path]
        self.files[path] = sha(text)
        if path.endswith("/previous_release"):
            self.previous = text
        return _report("written", path, ok=True, changed=True)

    def _op_drain(self, **_: Any) -> dict[str, Any]:
        if "drain" in self.faults:
            return _report("deadline", "memory not back", memory={"usage": 9, "limit": 10})
        return _report("drained", "drained", started=1.0, ended=1.5)

    def _op_pull_folder(self, name: str, **_: Any) -> dict[str, Any]:
        if not (name.startswith(".partial-") and name.endswith("-pull")) or "/" in name:
            return _report("refused", f"not a pull's partial folder: {name[:80]!r}")
        return canned("pull_folder", "kept")

    # a release's files: a file's identity is its sha256 ("id-" before it)

    def _op_file_sums(self, directory: str, names: list[str], **_: Any) -> dict[str, Any]:
        sums = self._sums(directory)
        return _report("read", f"{len(names)} file(s) hashed",
                       sums={n: sums.get(n) for n in names})

    def _op_identities(self, directory: str, names: list[str], **_: Any) -> dict[str, Any]:
        if not self._sums(directory) and directory.startswith(RELEASES):
            return _report("read", "0 identities read", identities={})  # incomplete
        return _report("read", f"{len(names)} identities read",
                       identities={n: self._identity(f"{directory}/{n}") for n in names})

    def _op_read_release(self, release: str, **_: Any) -> dict[str, Any]:
        if release not in self.releases:
            return _report("missing", f"release {release} is not on the host")
        listed = {n: {"sha256": s, "size": 0} for n, s in self.releases[release].items()}
        return _report("read", f"release {release}'s manifest read",
                       manifest=json.dumps({"artifacts": listed}),
                       sums=self._sums(f"{RELEASES}/{release}"))

    def _op_install_release(self, release: str, partial: str, names: list[str],
                            expect: dict[str, str | None] | None, **_: Any) -> dict[str, Any]:
        if expect is not None and any(
                self._identity(f"{partial}/{n}") != expect.get(n) for n in names):
            self._drop(partial)
            return _report("changed", f"{partial} changed since it was staged: removed")
        found = self._sums(partial)
        self._drop(partial)
        self.releases[release] = {n: found[n] for n in names if n in found}
        return _report("installed", f"installed release {release}",
                       identities={n: self._identity(f"{RELEASES}/{release}/{n}") for n in names})

    def _op_staging_survey(self, release: str, **_: Any) -> dict[str, Any]:
        """Stale staging (other releases') and RELEASE's own are cleared first."""
        staged = {p.removeprefix(f"{STAGING}/").split("/")[0] for p in self.files
                  if p.startswith(f"{STAGING}/")}
        stale = sorted(staged - {release})
        self._drop(STAGING)
        return _report("surveyed", f"{len(stale)} stale staging folder(s) removed", links=[],
                       stale=stale, present=release in self.releases, same_device=True)

    def _op_unstage(self, release: str, **_: Any) -> dict[str, Any]:
        if not self._drop(f"{STAGING}/{release}"):
            return _report("none", f"nothing staged for {release}")
        return _report("removed", f"removed the staging of {release}")

    def _op_owners(self, ports: list[int], pid: int | None, **_: Any) -> dict[str, Any]:
        return self._ports(ports, pid)

    def _op_input_check(self, path: str, size: int | None) -> dict[str, Any]:
        digest = self.files.get(path)
        if digest is None:
            return _report("missing", f"{path} missing", size=None, sha256=None)
        return _report("present", f"{path} present", size=size, sha256=digest)

    def _op_probe(self, input_path: str, input_size: int | None, status_url: str,
                  ports: list[int] | None, pid: int | None) -> dict[str, Any]:
        """validate's checks before the proof: the input, /status, the ports' owners."""
        found = self._op_input_check(input_path, input_size)
        status = self._status() if status_url and self.daemon else None
        return _report("probed", found["reason"], input=found, status=status,
                       owners=self._ports(list(ports), pid) if ports else None)

    def _op_stage_input(self, partial: str, path: str, sha256: str) -> dict[str, Any]:
        have = self.files.get(partial)
        if have is None:
            return _report("missing", f"{partial} missing")
        if have != sha256:
            del self.files[partial]
            return _report("mismatch", f"sha256 {have[:12]} is not {sha256[:64]}")
        self.files[path] = self.files.pop(partial)
        return _report("staged", f"staged {path}")

    def _op_lock(self, root: str, do: str, holder: dict[str, Any], expect: str | None
                 ) -> dict[str, Any]:
        """ops.lock, for one run at a time: taken, refreshed, released; another run's lock
        is "held" (an age of 0: never stale)."""
        mine = self.locked_by in (None, holder.get("run_id"))
        ident = {"host_id": sha(self.name)[:32]}
        if not mine and do != "break":
            text = json.dumps({**holder, "run_id": self.locked_by})
            return _report("held", "held by another run", ok=False, **ident,
                           lock={"text": text, "age": 0.0, "sha256": sha(text)})
        self.locked_by = None if do == "release" else holder.get("run_id")
        return _report("done", f"lock: {do}", ok=True, note=do, **ident)

    def _op_forget_validated(self, root: str) -> dict[str, Any]:
        was, self.validated = self.validated, None
        self.files.pop(f"{root}/rollout/validated.json", None)
        return _report("removed", "validation evidence removed") if was else _report(
            "none", "no validation evidence")

    # ---------------------------------------------------------------- what the host holds

    def _op_facts(self, root: str, digests: list[str] | None, **_: Any) -> dict[str, Any]:
        return _report("read", "host facts", **self.facts(digests))

    def facts(self, digests: list[str] | None = None) -> dict[str, Any]:
        """The facts ops.facts reads here; `digests`: the files to hash."""
        exe = f"{RELEASES}/{self.daemon}/cuzk-daemon" if self.daemon else None
        return {
            "time": 1.0, "root": ROOT, "python": "3.11.2", "held": self.held,
            "cgroup": {"memory": {"usage": 1 << 20, "limit": 512 << 20, "source": "cgroup-v2"}},
            "daemon": {"state": "running", "pid": self.pid, "starttime": 1, "exe": exe}
            if self.daemon else {"state": "none"},
            "supervisor": {"pid": 9, "alive": self.supervisor, "state": "running"},
            "current_release": self.current, "previous_release": self.previous,
            "releases": [{"id": r, "mtime": float(i), "has_daemon": True}
                         for i, r in enumerate(self.releases)],
            "disk": {"free_bytes": 10 << 30}, "root_writable": "preflight" not in self.faults,
            "registered": "none", "validated": self.validated,
            "digests": {path: self._digest(path) for path in digests or []},
            "errors": {},
        }

    def _status(self) -> str:
        return json.dumps({"version": self.daemon, "uptime_secs": 0.1})

    def _ports(self, asked: list[int], pid: int | None = None) -> dict[str, Any]:
        """ops.owners: who holds each port (the stranger, else our daemon) and, for `pid`,
        that process (None: not running)."""
        holder = self.stranger or (self.pid if self.daemon else None)
        owners = [{"pid": holder, "ancestors": [1], "cmdline": "x", "age_secs": 1.0}]
        out: dict[str, Any] = {"ports": {str(p): owners if holder else [] for p in asked}}
        if pid is not None:
            mine = self.daemon is not None and pid == self.pid
            out["pid"] = {"pid": pid, "ancestors": [9], "age_secs": 1.0} if mine else None
        return out

    def _digest(self, path: str) -> str | None:
        m = re.fullmatch(rf"{RELEASES}/([^/]+)/([^/]+)", path)
        if m:
            return self.releases.get(m.group(1), {}).get(m.group(2))
        return self.files.get(path)

    def _sums(self, directory: str) -> dict[str, str]:
        if "switch" in self.faults and directory == f"{RELEASES}/{self.bad_release}":
            return {}  # the release on the host is incomplete
        if "/.partial-" in directory or directory.startswith(STAGING + "/"):
            return {p.rsplit("/", 1)[-1]: s for p, s in self.files.items()
                    if p.startswith(directory + "/")}
        return dict(self.releases.get(directory.rsplit("/", 1)[-1], {}))

    def _identity(self, path: str) -> str | None:
        digest = self._digest(path)
        return f"id-{digest}" if digest else None

    def _drop(self, folder: str) -> list[str]:
        """Remove the files under `folder`; the paths removed."""
        gone = [p for p in self.files if p.startswith(folder + "/")]
        for path in gone:
            del self.files[path]
        return gone

    def _bad(self, kind: str) -> bool:
        return kind in self.faults and self.current == self.bad_release

    def staged(self) -> dict[str, str]:
        """The files under the staging folder: path: sha256."""
        return {p: d for p, d in self.files.items() if p.startswith(STAGING)}

    # ---------------------------------------------------------------- the command lines left

    def _answer(self, command: str, stdin: str) -> tuple[int, str]:
        argv = shlex.split(command)
        if argv[:2] == ["python3", "-"]:  # a host script, its source on stdin
            return self._script(command, stdin)
        if argv[:3] == ["mkdir", "-p", "--"] or (argv[0], argv[2:3]) == ("chmod", ["--"]):
            return 0, ""  # put_and_digest's folder and mode, around its put
        if argv[:2] == ["sha256sum", "--"]:  # put_and_digest's check of what it wrote
            digest = self.files.get(argv[2])
            return (0, f"{digest}  {argv[2]}\n") if digest else (1, "")
        raise AssertionError(f"a command line the fake host does not answer: {command[:120]!r}")

    def _script(self, command: str, stdin: str) -> tuple[int, str]:
        if stdin.startswith('"""rollout guard') and " --left " in command:
            return 0, json.dumps({"busy": [], "runs": []})  # no guard was ever left here
        raise AssertionError(f"unknown host script: {stdin[:60]!r}")

    # ---------------------------------------------------------------- for assertions

    def commands(self, pattern: str) -> list[str]:
        return [c for c in self.sent if re.search(pattern, c)]


def _report(outcome: str, reason: str, **data: Any) -> dict[str, Any]:
    """A report as ops.py makes one: its outcome word, why, and its data."""
    return {"outcome": outcome, "reason": reason, **data}
