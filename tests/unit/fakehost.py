"""A fake host behind the Transport interface: it serves facts from a small scripted state,
answers the commands the steps send, records every one of them, and fails where told.

No Docker, no SSH, no root: the engine tests run against this in milliseconds.
"""

from __future__ import annotations

import hashlib
import json
import re
import shlex
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rollout.transport.base import RunResult, Stream, Transport

ROOT = "/data"
CURRENT = f"{ROOT}/current"
RELEASES = f"{ROOT}/releases"
STAGING = f"{ROOT}/rollout/staging"


def sha(data: bytes | str) -> str:
    return hashlib.sha256(data.encode() if isinstance(data, str) else data).hexdigest()


class CannedStream(Stream):
    """A host's stream that says these lines, one a readline, then ends; `stderr`: what
    the host wrote there."""

    def __init__(self, lines: list[str], stderr: bytes = b"") -> None:
        self.lines = list(lines)
        self.stderr = stderr

    def readline(self, timeout: float) -> str:
        return self.lines.pop(0) if self.lines else ""

    def write(self, text: str) -> bool:
        return True

    @property
    def ended(self) -> bool:
        return not self.lines

    def close(self) -> None:
        self.lines = []


@dataclass
class FakeHost(Transport):
    """One host's state. `faults` names what goes wrong: a step kind, or `prune`."""

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

    # ---------------------------------------------------------------- Transport

    def run(self, command: str, timeout: float | None = None, stdin: str | None = None
            ) -> RunResult:
        self.sent.append(command)
        code, out = self._answer(command, stdin or "")
        return RunResult(command, code, out, "" if code == 0 else out)

    def call(self, source: str, call: str, kwargs: Mapping[str, Any],
             timeout: float | None = None) -> RunResult:
        """A host action of ops.py: a dict in, its report out (one JSON line)."""
        self.sent.append(f"call {call} {json.dumps(dict(kwargs), sort_keys=True)}")
        action = call.removeprefix("ops.")
        report = getattr(self, f"_op_{action}")(**kwargs)
        return RunResult(f"call {call}", 0, json.dumps(report) + "\n", "")

    # ---------------------------------------------------------------- ops.py, as this host does it

    def _op_hold(self, root: str) -> dict[str, Any]:
        was, self.held = self.held, True
        return {"outcome": "kept" if was else "set", "reason": "hold set"}

    def _op_release_hold(self, root: str) -> dict[str, Any]:
        was, self.held = self.held, False
        return {"outcome": "released" if was else "none", "reason": "hold released"}

    def _op_stop(self, root: str, signal: str = "SIGTERM", grace: float = 10.0,
                 set_hold: bool = True, adopt_pid: int = 0, adopt_starttime: Any = None,
                 keep_release: str | None = None, **_: Any) -> dict[str, Any]:
        if keep_release and self.daemon == keep_release:
            return {"outcome": "kept", "reason": "kept", "pid": self.pid, "starttime": 1}
        self.held = self.held or set_hold
        if adopt_pid:
            return {"outcome": "stopped", "reason": "adopted", "pid": adopt_pid,
                    "starttime": adopt_starttime, "signal": signal, "adopted": True}
        code, out = self._stop()
        report: dict[str, Any] = json.loads(out)
        report.setdefault("reason", report["outcome"])
        return report

    def _op_work(self, status_url: str) -> dict[str, Any]:
        if self.daemon is None:
            return {"outcome": "no-answer", "reason": "no daemon", "jobs": []}
        return {"outcome": "idle", "reason": "no job in flight", "jobs": [], "queue_depth": 0}

    def _op_cordon(self, root: str, run_id: str, command: str, **_: Any) -> dict[str, Any]:
        return {"outcome": "cordoned", "reason": "cordon command exited 0", "exit": 0}

    def _op_uncordon(self, root: str, command: str, **_: Any) -> dict[str, Any]:
        return {"outcome": "uncordoned", "reason": "uncordon command exited 0", "exit": 0}

    def _op_point_current(self, root: str, release: str) -> dict[str, Any]:
        before = self.current
        if release == before:
            return {"outcome": "kept", "reason": "already", "previous": before}
        if release not in self.releases:
            return {"outcome": "missing", "reason": f"release {release} is not on the host",
                    "previous": before}
        self.current = release
        return {"outcome": "pointed", "reason": f"current -> {release}", "previous": before}

    def _op_restore_config(self, config_path: str, kept_config: str) -> dict[str, Any]:
        if kept_config not in self.files:
            return {"outcome": "none", "reason": "no kept config"}
        self.files[config_path] = self.files[kept_config]
        return {"outcome": "restored", "reason": "restored"}

    def _op_run_supervisor(self, root: str, restart: bool = False) -> dict[str, Any]:
        self.supervisor = True
        return {"outcome": "restarted" if restart else "started", "reason": "started"}

    def _op_start(self, root: str, wait: float = 60.0, **_: Any) -> dict[str, Any]:
        if self.current is None:
            return {"outcome": "no-release", "reason": "current points nowhere"}
        self.held = False
        self.supervisor = True
        if self._bad("start"):
            return {"outcome": "not-started", "reason": "not started"}
        self.daemon = self.current
        self.pid += 1  # a new process: a new pid
        line = f"{self.pid} 1 {RELEASES}/{self.current}/cuzk-daemon"
        return {"outcome": "started", "reason": "started", "pid": self.pid, "pidline": line,
                "release": self.current}

    def _op_wait_ready(self, status_url: str, seconds: float, ports: Any = (),
                       **_: Any) -> dict[str, Any]:
        if self._bad("ready"):
            self.daemon = None
            return {"outcome": "died", "reason": f"daemon {self.pid} died during start-up"}
        status = json.dumps({"version": self.daemon, "uptime_secs": 0.1})
        return {"outcome": "ready", "reason": "ready", "answer": status,
                "owners": self._ports(list(ports))}

    def _op_prove(self, command: str, timeout: float, kill_after: float, evidence: str,
                  record: str = "", **_: Any) -> dict[str, Any]:
        _, out = self._prove(["--record", record, "--evidence", evidence])
        report: dict[str, Any] = json.loads(out)
        return report

    def _op_prune(self, root: str, releases: list[str], keep: Any = None) -> dict[str, Any]:
        if "prune" in self.faults and self.current == self.bad_release:
            return {"outcome": "failed", "reason": "could not remove: Read-only file system"}
        removed = [r for r in releases if r != self.current and self.releases.pop(r, None)]
        return {"outcome": "pruned" if removed else "none", "reason": "pruned",
                "removed": removed}

    def _op_remove_partial(self, root: str, name: str) -> dict[str, Any]:
        return {"outcome": "removed", "reason": f"removed {name}"}

    def _op_pointed(self, root: str) -> dict[str, Any]:
        return {"outcome": "pointed" if self.current else "none", "reason": "read",
                "current": self.current, "previous": self.previous}

    def _op_log_tail(self, root: str, lines: int = 20) -> dict[str, Any]:
        return {"outcome": "read", "reason": "read", "text": "daemon log\n"}

    def _op_make_folder(self, path: str, link_ok: bool = False) -> dict[str, Any]:
        return {"outcome": "kept", "reason": f"{path} already there"}

    def _op_config_folders(self, config_path: str, param_cache: str) -> dict[str, Any]:
        return {"outcome": "kept", "reason": "folders there"}

    def _op_remove_files(self, paths: list[str]) -> dict[str, Any]:
        removed = [p for p in paths if self.files.pop(p, None) is not None]
        return {"outcome": "removed" if removed else "none", "reason": "removed",
                "removed": removed}

    def _op_pull_folder(self, root: str, name: str) -> dict[str, Any]:
        return {"outcome": "made", "reason": f"made {name}"}

    # what preflight reads: a host with no CPU flags listed, no GPU, libraries all found

    def _op_cpu_info(self) -> dict[str, Any]:
        return {"outcome": "none", "reason": "no flags line", "text": ""}

    def _op_gpus(self, timeout: float = 60.0) -> dict[str, Any]:
        return {"outcome": "ran", "reason": "nvidia-smi exited 0", "exit": 0, "output": ""}

    def _op_ldd(self, directory: str, names: list[str]) -> dict[str, Any]:
        return {"outcome": "read", "reason": "ldd", "outputs": {n: "" for n in names}}

    def _op_file_present(self, path: str) -> dict[str, Any]:
        return {"outcome": "present", "reason": f"{path} present"}

    # a release's files: a file's identity is its sha256 ("id-" before it)

    def _op_file_sums(self, directory: str, names: list[str], mode: Any = None
                      ) -> dict[str, Any]:
        sums = self._sums(directory)
        return {"outcome": "read", "reason": "hashed",
                "sums": {n: sums.get(n) for n in names}}

    def _op_identities(self, directory: str, names: list[str], evict: bool = False
                       ) -> dict[str, Any]:
        if not self._sums(directory) and directory.startswith(RELEASES):
            return {"outcome": "read", "reason": "read", "identities": {}}  # incomplete
        return {"outcome": "read", "reason": "read",
                "identities": {n: self._identity(f"{directory}/{n}") for n in names}}

    def _op_read_release(self, root: str, release: str) -> dict[str, Any]:
        if release not in self.releases:
            return {"outcome": "missing", "reason": f"release {release} is not on the host"}
        listed = {n: {"sha256": s, "size": 0} for n, s in self.releases[release].items()}
        return {"outcome": "read", "reason": "read", "manifest": json.dumps(
            {"artifacts": listed}), "sums": self._sums(f"{RELEASES}/{release}")}

    def _op_install_release(self, root: str, release: str, partial: str, manifest: str,
                            names: list[str], expect: Any = None) -> dict[str, Any]:
        if expect is not None and any(
                self._identity(f"{partial}/{n}") != expect.get(n) for n in names):
            self._drop(partial)
            return {"outcome": "changed", "reason": f"{partial} changed since it was staged"}
        found = self._sums(partial)
        self._drop(partial)
        self.releases[release] = {n: found[n] for n in names if n in found}
        return {"outcome": "installed", "reason": f"installed release {release}",
                "identities": {n: self._identity(f"{RELEASES}/{release}/{n}") for n in names}}

    def _op_staging_survey(self, root: str, release: str, names: list[str]) -> dict[str, Any]:
        return {"outcome": "surveyed", "reason": "surveyed", "links": [], "stale": [],
                "present": release in self.releases, "same_device": True}

    def _op_unstage(self, root: str, release: str) -> dict[str, Any]:
        self._drop(f"{STAGING}/{release}")
        return {"outcome": "removed", "reason": f"removed the staging of {release}"}

    def _drop(self, folder: str) -> None:
        for path in [p for p in self.files if p.startswith(folder + "/")]:
            del self.files[path]

    def _op_owners(self, ports: list[int], pid: Any = None, **_: Any) -> dict[str, Any]:
        return self._ports(ports)

    def _op_input_check(self, path: str, size: Any = None) -> dict[str, Any]:
        digest = self.files.get(path)
        return {"outcome": "present" if digest else "missing", "reason": path,
                "size": size if digest else None, "sha256": digest}

    def _op_probe(self, input_path: str, input_size: Any = None, status_url: str = "",
                  ports: Any = None, pid: Any = None) -> dict[str, Any]:
        """validate's checks before the proof: the input, /status, the ports' owners."""
        status = json.dumps({"version": self.daemon, "uptime_secs": 0.1}) if self.daemon else None
        return {"outcome": "probed", "reason": "probed",
                "input": self._op_input_check(input_path, input_size),
                "status": status if status_url else None,
                "owners": self._ports(list(ports)) if ports else None}

    def _op_stage_input(self, partial: str, path: str, sha256: str) -> dict[str, Any]:
        if self.files.get(partial) != sha256:
            self.files.pop(partial, None)
            return {"outcome": "mismatch", "reason": "sha256 differs"}
        self.files[path] = self.files.pop(partial)
        return {"outcome": "staged", "reason": f"staged {path}"}

    def _op_register(self, root: str, onstart: str = "", **_: Any) -> dict[str, Any]:
        return {"outcome": "none", "reason": "no start-up mechanism found", "how": "none"}

    def _op_forget_validated(self, root: str) -> dict[str, Any]:
        was, self.validated = self.validated, None
        return {"outcome": "removed" if was else "none", "reason": "evidence removed"}

    def put(self, local_path: str, remote_path: str, resume: bool = False,
            progress: Any = None) -> None:
        self.sent.append(f"put {remote_path}")
        self.uploads[remote_path] = self.files[remote_path] = sha(Path(local_path).read_bytes())

    def get(self, remote_path: str, local_path: str) -> None:
        raise NotImplementedError

    # ---------------------------------------------------------------- what the host does

    def facts(self, command: str) -> dict[str, Any]:
        argv = shlex.split(command)
        digests = {argv[i + 1]: self._digest(argv[i + 1])
                   for i, a in enumerate(argv) if a == "--digest"}
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
            "digests": digests,
            "errors": {},
        }

    def _digest(self, path: str) -> str | None:
        m = re.fullmatch(rf"{RELEASES}/([^/]+)/([^/]+)", path)
        if m:
            return self.releases.get(m.group(1), {}).get(m.group(2))
        return self.files.get(path)

    def _script(self, command: str, stdin: str) -> tuple[int, str]:
        if stdin.startswith('"""Print one JSON object of facts'):
            return 0, json.dumps(self.facts(command))
        if stdin.startswith('"""Stop the daemon'):
            return self._stop()
        if stdin.startswith('"""Wait until a stopped daemon'):
            if "drain" in self.faults:
                return 1, json.dumps({"outcome": "deadline", "memory": {"usage": 9, "limit": 10}})
            return 0, json.dumps({"outcome": "drained", "started": 1.0, "ended": 1.5})
        if stdin.startswith('"""Run the validation proof'):
            return self._prove(shlex.split(command))
        if stdin.startswith('"""Files the controller writes') and " check " in f"{command} ":
            return 0, json.dumps({"ok": True, "problems": []})  # nothing planted here
        if stdin.startswith('"""rollout pce: sizes'):
            return 0, json.dumps({"files": {}, "free": 2**50})  # no PCE yet, room for one
        if stdin.startswith('"""rollout pce: remove'):
            return 0, json.dumps({"removed": False})  # no leftover temporary
        if stdin.startswith('"""rollout guard') and " --left " in command:
            return 0, json.dumps({"busy": [], "runs": []})  # no guard was ever left here
        raise AssertionError(f"unknown host script: {stdin[:60]!r}")

    def _files(self, argv: list[str], stdin: str) -> tuple[int, str]:
        """files.py write|copy, its own source first on stdin ("LENGTH\n" then the script)."""
        size, _, rest = stdin.partition("\n")
        text = rest.encode()[int(size):].decode()
        if argv[0] == "copy":
            if argv[1] not in self.files:
                return 0, json.dumps({"ok": True, "changed": False})
            self.files[argv[2]] = self.files[argv[1]]
            return 0, json.dumps({"ok": True, "changed": True})
        path = argv[1]
        if "--if-changed" in argv and self.files.get(path) == sha(text):
            return 0, json.dumps({"ok": True, "changed": False})
        if "--keep" in argv and path in self.files:
            self.files[argv[argv.index("--keep") + 1]] = self.files[path]
        self.files[path] = sha(text)
        if path.endswith("/validated.json"):
            self.validated = json.loads(text)
        if path.endswith("/previous_release"):
            self.previous = text
        return 0, json.dumps({"ok": True, "changed": True})

    def _ports(self, asked: list[int]) -> dict[str, Any]:
        holder = self.stranger or (self.pid if self.daemon else None)
        owners = [{"pid": holder, "ancestors": [1], "cmdline": "x", "age_secs": 1.0}]
        ports = {str(p): owners if holder else [] for p in asked}
        me = {"pid": self.pid, "ancestors": [9], "age_secs": 1.0} if self.daemon else None
        return {"ports": ports, "pid": me}

    def _prove(self, argv: list[str]) -> tuple[int, str]:
        self.validated = None  # the evidence of an earlier validation goes first
        if self._bad("validate"):
            out = "=== Proof Result ===\nstatus:    FAILED\nerror:     bad proof\n"
            return 0, json.dumps({"exit": 0, "elapsed": 0.1, "stdout": out, "stderr": "",
                                  "status_after": None, "recorded": False})
        record = argv[argv.index("--record") + 1]
        if record:
            path = argv[argv.index("--evidence") + 1]
            self.files[path] = sha(record + "\n")
            self.validated = json.loads(record)
        out = "=== Proof Result ===\njob_id: 7\nstatus:    COMPLETED\n"
        return 0, json.dumps({"exit": 0, "elapsed": 0.1, "stdout": out, "stderr": "",
                              "status_after": None, "recorded": bool(record)})

    def _stop(self) -> tuple[int, str]:
        if self.daemon is None:
            return 0, json.dumps({"outcome": "none"})
        if "stop" in self.faults:
            self.faults.discard("stop")  # it survives once: the rollback's forced stop works
            return 1, json.dumps({"outcome": "survived", "pid": self.pid})
        self.daemon = None
        return 0, json.dumps({"outcome": "stopped", "pid": self.pid, "starttime": 1,
                              "signal": "SIGTERM", "escalated": False})

    def _sums(self, directory: str) -> dict[str, str]:
        if "switch" in self.faults and directory == f"{RELEASES}/{self.bad_release}":
            return {}  # the release on the host is incomplete
        if "/.partial-" in directory or directory.startswith(STAGING + "/"):
            return {p.rsplit("/", 1)[-1]: s for p, s in self.files.items()
                    if p.startswith(directory + "/")}
        return dict(self.releases.get(directory.rsplit("/", 1)[-1], {}))

    def staged(self) -> dict[str, str]:
        """The files under the staging folder: path: sha256."""
        return {p: d for p, d in self.files.items() if p.startswith(STAGING)}

    def _identity(self, path: str) -> str | None:
        digest = self._digest(path)
        return f"id-{digest}" if digest else None

    def _answer(self, command: str, stdin: str) -> tuple[int, str]:  # noqa: C901 - a table
        if command.startswith("python3 - "):
            return self._script(command, stdin)
        if command.startswith("python3 -c ") and "files.py" in command:
            return self._files(shlex.split(command)[3:], stdin)
        if " && python3 - " in command:  # a script after a command of its own (the hold)
            before, _, script = command.partition(" && python3 - ")
            if before.endswith("/hold") and "touch -- " in before:
                self.held = True
            return self._script(f"python3 - {script}", stdin)
        if command.startswith("readlink -f -- "):
            return (0, f"{RELEASES}/{self.current}\n") if self.current else (1, "")
        if command.startswith("sha256sum -- "):  # the transport's own check of a put
            path = shlex.split(command)[2]
            digest = self.files.get(path)
            return (0, f"{digest}  {path}\n") if digest else (1, "")
        if "cat > " in command and "&& mv -T --" in command:
            path = shlex.split(command.split("&& mv -T -- ")[-1])[-1]
            self.files[path] = sha(stdin)
            if path.endswith("/validated.json"):
                self.validated = json.loads(stdin)
            return 0, ""
        if m := re.match(r"ln -sfn -- releases/(\S+) ", command):
            self.current = m.group(1)
            return 0, ""
        if command.startswith("printf %s ") and "previous_release" in command:
            self.previous = shlex.split(command)[2]
            return 0, ""
        if command.endswith("/hold") and "touch --" in command:
            self.held = True
            return 0, ""
        if command.startswith("rm -f -- ") and command.endswith("/hold"):
            self.held = False
            return 0, ""
        if "--daemonize" in command and "grep -qF --" not in command:
            self.supervisor = True
            return 0, ""
        if "grep -qF --" in command and "daemon.pid" in command:  # start: wait for the daemon
            if command.startswith("target=$(readlink -f -- "):  # it releases the hold first
                if self.current is None:
                    return 3, ""
                self.held = "rm -f -- /data/rollout/hold " not in command and self.held
                self.supervisor = self.supervisor or "--daemonize" in command
            if self._bad("start") or self.held:
                return 1, ""
            self.daemon = self.current
            self.pid += 1  # a new process: a new pid
            return 0, f"{self.pid} 1 {RELEASES}/{self.current}/cuzk-daemon\n"
        if "curl -fsS" in command:
            if self._bad("ready"):
                self.daemon = None
                return 3, f"daemon {self.pid} died during start-up"
            return 0, json.dumps({"version": self.daemon, "uptime_secs": 0.1})
        if "cuzk-bench" in command:
            if "rm -f -- /data/rollout/validated.json;" in command:
                self.validated = None  # the evidence of an earlier validation goes first
            if self._bad("validate"):
                return 0, "=== Proof Result ===\nstatus:    FAILED\nerror:     bad proof\n"
            return 0, "=== Proof Result ===\njob_id: 7\nstatus:    COMPLETED\n"
        return 0, ""

    def _bad(self, kind: str) -> bool:
        return kind in self.faults and self.current == self.bad_release

    # ---------------------------------------------------------------- for assertions

    def commands(self, pattern: str) -> list[str]:
        return [c for c in self.sent if re.search(pattern, c)]
