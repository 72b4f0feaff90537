"""Staging ahead for pulled releases (issue 29): with `--release URL`, the later batches'
hosts download the release into the staging folder while the canary runs, each file
checked as written, and their upload installs that copy by a rename. Against fake hosts
whose download (fetch.py's stream) is answered from what the URL would serve."""

from __future__ import annotations

import json
import shlex
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import pytest
from fakehost import RELEASES, STAGING, CannedStream, FakeHost
from test_engine import NEW, OLD, Fleet, release

from rollout import failpoints
from rollout.commands.dryrun import dry_run
from rollout.engine.run import Engine, EngineOptions, RunSummary
from rollout.errors import TransportError
from rollout.output.events import Event, EventBus
from rollout.transport.base import Stream

URL = "http://127.0.0.1:9/cuzk/v2"  # never dialled: the fake hosts answer the download


class HangingStream(Stream):
    """A download that never ends: no line, ever (the controller's tether checks still run)."""

    def readline(self, timeout: float) -> str:
        time.sleep(min(timeout, 0.01))
        return ""

    def write(self, text: str) -> bool:
        return True

    @property
    def ended(self) -> bool:
        return False

    def close(self) -> None:
        pass


@dataclass
class PullHost(FakeHost):
    """A fake host that runs fetch.py's download: each --file lands in --dir with the digest
    asked for, unless `staging_fault` hits a download into the staging folder: `partial`
    (half a file, then cut), `sha256` (refused, deleted), `hang` (never ends)."""

    staging_fault: str | None = None
    fetched: list[str] = field(default_factory=list)  # the --dir of each download

    def open_stream(self, command: str, stdin: bytes) -> Stream | None:
        argv = shlex.split(command)
        if "--dir" not in argv or "fetch.py" not in argv[2]:  # not a download
            return super().open_stream(command, stdin)
        directory = argv[argv.index("--dir") + 1]
        files = [argv[i + 1:i + 5] for i, a in enumerate(argv) if a == "--file"]
        self.fetched.append(directory)
        fault = self.staging_fault if directory.startswith(STAGING + "/") else None
        if fault == "hang":
            return HangingStream()
        done: dict[str, Any] = {}
        for name, _url, digest, size in files:
            if fault is not None:
                if fault == "partial":
                    self.files[f"{directory}/{name}"] = "half"
                error = {"kind": "interrupted" if fault == "partial" else "sha256",
                         "file": name, "message": f"{name}: {fault}"}
                return CannedStream([json.dumps({"files": done, "error": error})])
            self.files[f"{directory}/{name}"] = digest
            done[name] = {"outcome": "downloaded", "received": int(size)}
        progress = [json.dumps({"progress": {"file": n, "bytes": int(s)}})
                    for n, _u, _d, s in files]
        return CannedStream([*progress, json.dumps({"files": done, "error": None})])


class PullFleet(Fleet):
    def __init__(self, tmp_path: Path, names: list[str]) -> None:
        super().__init__(tmp_path, names)
        self.hosts = {n: PullHost(n) for n in names}
        self.unreachable: set[str] = set()
        self.hook: Callable[[Event], None] = lambda _event: None  # each event, once recorded

    def host(self, name: str) -> PullHost:
        host = self.hosts[name]
        assert isinstance(host, PullHost)
        return host

    def connect(self, name: str) -> FakeHost:
        if name in self.unreachable:
            raise TransportError(f"{name}: connection refused")
        return self.hosts[name]

    def pull(self, rid: str, **options: Any) -> RunSummary:
        """A rollout of release `rid` published at URL: the hosts download it."""
        plan = self.plan()
        bus = EventBus(plan.run_id)
        self.events.clear()

        def record(event: Event) -> None:
            self.events.append(event)
            self.hook(event)

        bus.subscribe(record)
        given = replace(release(self.tmp, rid), source=URL)
        return Engine(plan, bus, lambda h: self.connect(h.name), self.tmp,
                      EngineOptions(release=given, **options)).run()

    def staged_events(self) -> dict[str, Event]:
        return {e.host or "": e for e in self.events if e.kind == "staged"}


@pytest.fixture
def fleet(tmp_path: Path) -> PullFleet:
    fleet = PullFleet(tmp_path, ["h1", "h2", "h3"])
    assert fleet.serving(OLD).plan().batches == [["h1"], ["h2", "h3"]]  # batches [1, 2]
    for host in fleet.hosts.values():
        host.sent.clear()
    return fleet


@pytest.fixture
def canary_parked(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The canary h1 parked before its validate, until the test says go."""
    monkeypatch.setenv("ROLLOUT_FAILPOINTS", "park-before-validate@h1")
    monkeypatch.setenv("ROLLOUT_PARK_DIR", str(tmp_path))
    monkeypatch.setattr(failpoints, "_remaining", None)
    return tmp_path / "park-before-validate.go"


def test_both_later_hosts_have_the_release_before_the_canary_validates(
    fleet: PullFleet, canary_parked: Path
) -> None:
    """While the canary waits before its validate, both later hosts' staging ends; what each
    holds then is read; only then does the canary validate."""
    seen: dict[str, dict[str, str]] = {}
    lock = threading.Lock()

    def at_park(event: Event) -> None:
        with lock:
            if event.kind == "parked":
                seen["parked"] = {}
            staged = [e for e in fleet.events if e.kind == "staged"]
            if "parked" in seen and len(staged) == 2 and not canary_parked.exists():
                for name in ("h2", "h3"):
                    seen[name] = fleet.hosts[name].staged()
                canary_parked.touch()

    fleet.hook = at_park
    summary = fleet.pull(NEW)
    assert summary.exit_code == 0, summary.outcomes
    want = {a.name: a.sha256 for a in release(fleet.tmp, NEW).artifacts}
    for name in ("h2", "h3"):  # held in staging when the canary's validate began
        assert seen[name] == {f"{STAGING}/{NEW}/{n}": s for n, s in want.items()}
        event = fleet.staged_events()[name]
        assert event.status == "ok" and event.data["source"] == URL, event
        assert f"downloaded by the host from {URL}" in (event.reason or "")
    validate_start = next(i for i, e in enumerate(fleet.events)
                          if e.kind == "step_start" and e.host == "h1" and e.step == "validate")
    assert all(i < validate_start for i, e in enumerate(fleet.events) if e.kind == "staged")
    for name in ("h2", "h3"):  # installed at their turn from staging: one download each
        host = fleet.host(name)
        assert host.fetched == [f"{STAGING}/{NEW}"]
        upload = fleet.steps(name)["upload"]
        assert upload.data["staged"] is True and "during the canary" in (upload.reason or "")
        assert fleet.steps(name)["switch"].data["checked"] == "identity"
        assert host.releases[NEW] == want and host.current == NEW and not host.staged()
    assert fleet.host("h1").fetched == [f"{RELEASES}/.partial-{NEW}-pull"]
    stages = {e.host for e in fleet.events if e.kind == "progress" and e.step == "staging"}
    assert stages == {"h2", "h3"}  # the staging downloads' progress, as a push's


@pytest.mark.parametrize("fault", ["partial", "sha256"])
def test_a_failed_staging_download_is_cleaned_and_the_host_pulls_at_its_turn(
    fleet: PullFleet, fault: str
) -> None:
    fleet.host("h2").staging_fault = fault
    summary = fleet.pull(NEW)
    assert summary.exit_code == 0, summary.outcomes  # staging never fails a host
    failed = fleet.staged_events()["h2"]
    assert failed.status == "failed" and "downloads the release at its turn" in str(failed.reason)
    host = fleet.host("h2")
    unstage = f'^call ops\\.unstage {{"release": "{NEW}", "root": "/data"}}'
    assert host.commands(unstage) and not host.staged()
    assert host.fetched == [f"{STAGING}/{NEW}", f"{RELEASES}/.partial-{NEW}-pull"]
    assert "host pulled release" in (fleet.steps("h2")["upload"].reason or "")
    assert host.current == NEW and host.releases[NEW]
    assert fleet.staged_events()["h3"].status == "ok"


def test_a_failed_canary_stops_the_staging_downloads_and_leaves_the_hosts_as_found(
    fleet: PullFleet,
) -> None:
    fleet.hosts["h1"].faults, fleet.hosts["h1"].bad_release = {"validate"}, NEW
    for name in ("h2", "h3"):
        fleet.host(name).staging_fault = "hang"
    summary = fleet.pull(NEW)
    assert summary.aborted == "canary batch failed: rollout stopped"
    for name in ("h2", "h3"):
        host = fleet.hosts[name]
        event = fleet.staged_events()[name]
        assert event.status == "failed" and "the run ended first" in str(event.reason)
        assert not host.staged() and NEW not in host.releases and host.current == OLD
        assert host.commands(f'^call ops\\.unstage {{"release": "{NEW}"')


def test_an_unreachable_host_is_not_staged(fleet: PullFleet) -> None:
    fleet.unreachable.add("h3")
    summary = fleet.pull(NEW)
    assert summary.outcomes["h3"].status == "unreachable"
    skipped = fleet.staged_events()["h3"]
    assert skipped.status == "skipped" and "unreachable" in str(skipped.reason), skipped
    assert not fleet.host("h3").fetched and not fleet.hosts["h3"].sent
    assert fleet.staged_events()["h2"].status == "ok"


def test_a_dry_run_stages_nothing(fleet: PullFleet) -> None:
    given = replace(release(fleet.tmp, NEW), source=URL)
    assert dry_run(fleet.plan(), lambda h: fleet.hosts[h.name], fleet.tmp, given).exit_code == 0
    for name in fleet.hosts:
        host = fleet.host(name)
        assert not host.fetched and not host.commands("staging_survey") and not host.staged()
