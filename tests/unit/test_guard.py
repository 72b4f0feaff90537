"""The host's guard: its decision (pure), the controller's summary of what it did, and the
script run for real against a temp root with the real supervisor and a stand-in daemon."""

from __future__ import annotations

import fcntl
import json
import os
import re
import shlex
import shutil
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from contexts import settings_for, small_host
from test_hostside_supervisor import FAKE_DAEMON, Host, alive, read_pidfile, wait_for

import rollout.engine.guard as guard_module
import rollout.engine.locks as locks_module
from rollout.engine.guard import (
    BOOTSTRAP,
    HostGuard,
    arm_input,
    guards_left,
    rollback_recipe,
    summarize,
)
from rollout.engine.hostplan import LOST, HostPlan, rollback_plan
from rollout.engine.locks import FleetLocks, Holder, LockEvents, LockPolicy
from rollout.errors import StepFailed
from rollout.host.facts import HostFacts
from rollout.host.layout import Layout
from rollout.host.scripts import guard, ops, script_text
from rollout.output.events import EventBus
from rollout.steps.decision import Action, Phase, Release, Skip, Target
from rollout.transport.base import Stream
from rollout.transport.local import LocalTransport

OLD, NEW = "old0000release", "new1111release"
BACK = ["stop", "drain", "switch", "start", "ready", "validate"]


def host_plan(root: str, previous: str | None, settings: Any = None) -> HostPlan:
    """The controller's plan of a host rolling NEW out over `previous` (its rollback is
    what the guard's recipe carries), with the lab playbook's settings unless given."""
    target = Target(small_host(), Layout(root), settings or settings_for(small_host()),
                    Release(NEW, "", "", ()))
    return HostPlan(HostFacts(), target, previous, ())


def decide(recipe: dict[str, Any], state: dict[str, Any],
           validated: dict[str, Any] | None = None) -> tuple[str, list[str]]:
    """The guard's (why, steps) from a recipe carrying the controller's plan."""
    full = {"rollback": rollback_recipe(host_plan("/data", recipe.get("previous"))), **recipe}
    summary, plan = guard.planned(full, state, validated)
    return summary, plan["steps"]


@pytest.mark.parametrize(
    ("phase", "previous", "steps"),
    [
        ("untouched", OLD, []),  # a guard never changes an untouched host
        ("stopped", OLD, BACK),
        ("switched", OLD, BACK),
        ("started", OLD, BACK),
        ("validated", OLD, []),
        ("stopped", None, ["stop"]),  # no previous release: left stopped and held
        ("started", NEW, ["stop"]),  # the previous is the new one
        ("validated", None, []),
    ],
)
def test_the_guard_runs_the_plan_of_the_phase_the_controller_reported(
    phase: str, previous: str | None, steps: list[str]
) -> None:
    summary, got = decide({"release": NEW, "previous": previous},
                          {"phase": phase, "armed": True})
    assert got == steps, summary
    if not steps:
        assert "nothing to do" in summary or "never changes an untouched host" in summary


@pytest.mark.parametrize("phase", list(Phase))
@pytest.mark.parametrize("previous", [OLD, None, NEW])
def test_the_guard_and_the_controller_roll_back_by_one_rule(
    phase: Phase, previous: str | None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The steps the guard executes, for every phase it may be lost in and with or without a
    previous release, are the controller's rollback_plan for that phase: one function."""
    controller = rollback_plan(phase, LOST, previous, NEW)
    ran: list[str] = []
    calls: list[list[str]] = []

    def run_entry(h: Any, entry: dict[str, Any], stopped: Any) -> tuple[str, str, Any]:
        ran.append(entry["step"])
        calls.append([c["call"] for c in entry["calls"]])
        return "ok", entry["step"], {}

    monkeypatch.setattr(guard, "run_entry", run_entry)
    monkeypatch.setattr(guard, "not_ours", lambda root, run: None)
    recipe = {"run_id": "run-1", "host": "h", "root": str(tmp_path), "release": NEW,
              "previous": previous if previous != NEW else None,
              "rollback": rollback_recipe(host_plan(str(tmp_path), previous))}
    (tmp_path / "rollout" / "runs" / "run-1").mkdir(parents=True)
    h = guard.Host(recipe, ops)
    events = guard.Events(str(tmp_path / "events.jsonl"), recipe, "1")
    ended = guard.take_over(h, events, {"phase": phase.label, "armed": True})
    if phase is Phase.UNTOUCHED:  # the watcher never gets here: a guard never acts there
        assert ran == [] and controller.kinds == ()
        return
    assert ran == list(controller.kinds), (phase, previous)
    assert all(calls), calls  # each step is host calls of ops.py, nothing of the guard's own
    assert h.to == controller.to
    want = "validated" if controller.rolled_back or not controller.kinds else "held"
    assert ended == want, (phase, previous)
    if previous in (None, NEW) and phase in (Phase.STOPPED, Phase.SWITCHED, Phase.STARTED):
        assert ran == ["stop"] and "left stopped and held" in controller.outcome


@pytest.mark.parametrize("plan", [None, "x", {"stopped": "x"}, {"stopped": {"steps": "stop"}},
                                  {"stopped": {"steps": ["stop", "rm -rf /"]}},
                                  {"stopped": {"steps": ["switch"], "to": None}}])
def test_a_recipe_without_a_usable_plan_does_nothing(plan: Any) -> None:
    with pytest.raises(guard.Failed, match="rollback plan"):
        guard.planned({"release": NEW, "rollback": plan}, {"phase": "stopped", "armed": True})


@pytest.mark.parametrize("phase", ["stopped", "switched", "started", "untouched"])
def test_a_guard_never_armed_does_nothing_whatever_the_phase(phase: str) -> None:
    """Started ahead (while upload and preflight run) but never armed: the host never left
    untouched in this run, whatever a stray line said."""
    summary, steps = decide({"release": NEW, "previous": OLD}, {"phase": phase})
    assert steps == [] and "never armed" in summary


def test_the_controller_lines_arm_the_guard_only_past_untouched() -> None:
    state: dict[str, Any] = {"phase": "untouched", "armed": False}
    assert guard.follow(state, "phase stopped") is False  # not armed: ignored
    assert state == {"phase": "untouched", "armed": False}
    assert guard.follow(state, "arm untouched") is False  # arming is for a change only
    assert guard.follow(state, "arm ../../x") is False and not state["armed"]
    assert guard.follow(state, "arm stopped") is True
    assert state == {"phase": "stopped", "armed": True}
    assert guard.follow(state, "phase started") is True and state["phase"] == "started"
    assert guard.follow(state, "phase bogus") is False and state["phase"] == "started"
    assert guard.follow(state, "settled") is True and state["settled"] is True


def test_the_host_lock_decides_whether_a_guard_may_act(tmp_path: Path) -> None:
    root = tmp_path
    (root / "rollout").mkdir()
    lock = root / "rollout" / "lock"
    assert "no host lock of run run-a" in (guard.not_ours(str(root), "run-a") or "")
    lock.write_text(json.dumps({"run_id": "run-a", "pid": 1}))
    assert guard.not_ours(str(root), "run-a") is None
    lock.write_text(json.dumps({"run_id": "run-b"}))
    assert "names run 'run-b', not run-a" in (guard.not_ours(str(root), "run-a") or "")
    for hostile in ("{not json", "null", '{"run_id": ["run-a"]}', '{"run_id": 7}', "\xff"):
        lock.write_text(hostile)
        assert guard.not_ours(str(root), "run-a") is not None, hostile
    lock.unlink()
    lock.mkdir()  # unreadable as a file: not this run's
    assert guard.not_ours(str(root), "run-a") is not None


def test_settled_host_is_left_alone_whatever_the_phase() -> None:
    assert decide({"release": NEW, "previous": OLD},
                  {"phase": "started", "settled": True})[1] == []


def test_run_ids_are_data_not_paths() -> None:
    for bad in ("../x", "a/b", "", "-x"):
        with pytest.raises(ValueError):
            guard.run_dir("/data", bad)


def test_summary_says_what_the_guard_did() -> None:
    events = [
        {"kind": "guard_takeover", "data": {"guard": "7", "phase": "stopped"}},
        {"kind": "guard_end", "status": "validated", "reason": f"roll back to {OLD}",
         "data": {"guard": "7", "release": OLD, "rolled_back": True, "acted": True}},
    ]
    report = {"guards": [{"guard": "7", "phase": "stopped", "ended": "validated"},
                         {"guard": "9", "phase": "validated", "settled": True}],
              "events": events}
    [only] = summarize(report)
    assert only["status"] == "validated"
    assert only["reason"] == ("controller lost in phase stopped; the host's guard rolled back "
                              f"to {OLD}, validated")
    pending = summarize({"guards": [{"guard": "3", "phase": "started"}], "events": []})
    assert pending[0]["status"] == "pending"


class TwoReleases(Host):
    """A temp host serving NEW from the real supervisor, OLD beside it with its config."""

    def __init__(self, tmp: Path) -> None:
        super().__init__(tmp)
        for rid in (OLD, NEW):
            where = self.root / "releases" / rid
            where.mkdir()
            (where / "cuzk-daemon").write_text(
                FAKE_DAEMON.format(python=sys.executable, root=str(self.root)))
            (where / "cuzk-daemon").chmod(0o755)
        (self.root / "current").unlink()
        (self.root / "current").symlink_to(f"releases/{NEW}")
        self.config = self.root / "cuzk.toml"
        self.config.write_text("new config\n")
        (self.root / f"cuzk.toml.for-{OLD}").write_text("old config\n")
        shutil.copy(self.script, self.path("supervisor.py"))
        self.script = self.path("supervisor.py")

    def recipe(self, run_id: str, previous: str | None, command: str | None = None,
               drain: dict[str, float | int] | None = None) -> dict[str, Any]:
        """The recipe of the controller's own plan on this root: the lab playbook with this
        root's config, no TCP port (the stand-in daemon has none), and `command` (a
        template) validating; the drain's settings replaced where given."""
        lab = settings_for(small_host())
        daemon = lab.daemon.model_copy(update={
            "config_path": str(self.config), "stop_grace": 5.0, "listen": "",
            "status_listen": ""})
        validation = lab.validation.model_copy(update={"timeout": 60.0, "command": command or (
            "printf '=== Proof Result ===\\nstatus:    COMPLETED\\n'; "
            "echo {{ release_id }} $(readlink current)")})
        settings = lab.model_copy(update={"daemon": daemon, "validation": validation})
        rollback = rollback_recipe(host_plan(str(self.root), previous, settings))
        for entry in (e for plan in rollback.values() for e in plan["calls"]):
            for call in entry["calls"]:
                if call["call"] == "drain":
                    call["kwargs"]["settings"] = drain or {
                        "deadline": 60.0, "plateau": 30.0, "zombie_grace": 5.0, "budget": 0}
        return {"run_id": run_id, "host": "tmp", "root": str(self.root), "release": NEW,
                "previous": previous, "rollback": rollback}

    def events(self, run_id: str) -> list[dict[str, Any]]:
        path = self.root / "rollout" / "runs" / run_id / "guard.jsonl"
        text = path.read_text() if path.exists() else ""
        return [json.loads(line) for line in text.splitlines()]


@pytest.fixture
def host(tmp_path: Path) -> Iterator[TwoReleases]:
    h = TwoReleases(tmp_path)
    try:
        yield h
    finally:
        h.cleanup()


def lock_for(host: TwoReleases, run_id: str) -> None:
    """The host lock, as the run's controller takes it (ops.lock)."""
    (host.root / "rollout" / "lock").write_text(json.dumps({"run_id": run_id, "pid": 1}))


def start(host: TwoReleases, recipe: dict[str, Any], answer_key: str = "guard") -> Any:
    """The guard started (ahead), not armed; its run holds the host lock."""
    lock_for(host, str(recipe["run_id"]))
    command = f"cd {shlex.quote(str(host.root))} && python3 -c {shlex.quote(BOOTSTRAP)} --arm"
    stream = LocalTransport().open_stream(command, arm_input(recipe))
    answer = json.loads(stream.readline(60))
    assert answer["ready"] is True and answer_key in answer, answer
    stream.answer = answer
    return stream


def arm(host: TwoReleases, recipe: dict[str, Any], phase: str = "stopped",
        answer_key: str = "guard") -> Any:
    """Started, then armed as the controller arms it right before the host's first change."""
    stream = start(host, recipe, answer_key)
    stream.write(f"arm {phase}\n")
    assert json.loads(stream.readline(60)) == {"armed": True}
    return stream


def test_lost_tether_in_phase_started_rolls_back_and_validates(host: TwoReleases) -> None:
    host.start()
    new = host.daemon()
    assert f"/releases/{NEW}/" in new[2]
    stream = arm(host, host.recipe("run-a", OLD))
    stream.write("phase switched\nphase started\n")
    stream.close()  # the controller is gone: no "settled"
    end = wait_for(lambda: next((e for e in host.events("run-a") if e["kind"] == "guard_end"),
                                None))
    assert end["status"] == "validated" and end["data"]["rolled_back"] is True, end
    assert end["data"]["phase"] == "started"
    assert (host.root / "current").readlink() == Path(f"releases/{OLD}")
    assert host.config.read_text() == "old config\n"
    assert not host.path("hold").exists()
    pid, _, exe = read_pidfile(host.root) or (0, 0, "")
    assert f"/releases/{OLD}/" in exe and alive(pid) and not alive(new[0])
    steps = {e["step"]: e for e in host.events("run-a") if e["kind"] == "step_end"}
    assert [steps[f"guard-{k}"]["status"] for k in ("stop", "switch", "start", "ready",
                                                       "validate")] == [
        "changed", "changed", "changed", "ok", "ok"]
    order = [e["step"] for e in host.events("run-a") if e["kind"] == "step_end"]
    assert order == [f"guard-{k}" for k in BACK], order
    stop, drain = steps["guard-stop"], steps["guard-drain"]
    assert stop["data"]["pid"] == new[0] and stop["data"]["starttime"] == new[1], stop
    # ops.drain ran with the recipe's settings, for the daemon the guard stopped: gone
    assert drain["status"] == "ok", drain  # the drain step's own verdict (judge.py)
    assert drain["data"]["outcome"] == "drained" and drain["data"]["state"] == "gone", drain
    assert (drain["data"]["pid"], drain["data"]["starttime"]) == (new[0], new[1]), drain
    assert drain["data"]["budget"] == 0 and drain["data"]["plateau"] == 30.0, drain
    assert all(e["run_id"] == "run-a" and e["host"] == "tmp" for e in host.events("run-a"))
    report = guard.report(str(host.root), "run-a", 5)
    assert summarize(report)[0]["reason"].endswith(f"rolled back to {OLD}, validated")


def inert_end(host: TwoReleases, run_id: str) -> dict[str, Any]:
    """The state of the run's only guard once it ended inert (bounded wait)."""
    where = host.root / "rollout" / "runs" / run_id

    def ended() -> dict[str, Any] | None:
        states = [json.loads(p.read_text()) for p in where.glob("state.*.json")]
        return states[0] if states and states[0].get("ended") else None

    return wait_for(ended)


@pytest.mark.parametrize("how", ["closed", "gone before the answer"])
def test_a_guard_started_ahead_and_never_armed_never_acts(host: TwoReleases, how: str) -> None:
    """Started ahead (while upload and preflight run), its controller gone before the
    host's first change (a refusal, a kill during the upload), even before it read the
    guard's answer: no takeover, no hold, the very same daemon, no event."""
    (host.root / "current").unlink()
    (host.root / "current").symlink_to(f"releases/{OLD}")
    host.start()
    old = host.daemon()
    recipe = host.recipe("run-u", OLD)
    if how == "closed":
        stream = start(host, recipe)
        stream.write("phase stopped\n")  # a stray phase line does not arm it
        stream.close()
    else:
        lock_for(host, "run-u")
        command = f"python3 -c {shlex.quote(BOOTSTRAP)} --arm"
        LocalTransport().open_stream(command, arm_input(recipe)).close()
    state = inert_end(host, "run-u")
    assert state["ended"] == "inert" and state["armed"] is False, state
    assert "never armed" in state["reason"], state
    assert host.events("run-u") == []
    assert not host.path("hold").exists() and host.config.read_text() == "new config\n"
    assert host.daemon()[:2] == old[:2] and alive(old[0])
    assert summarize(guard.report(str(host.root), "run-u", 5)) == []
    assert guard.left(str(host.root), 5, mark=True) == {"busy": [], "runs": []}


def test_an_armed_guard_whose_lock_another_run_holds_does_not_act(host: TwoReleases) -> None:
    host.start()
    new = host.daemon()
    stream = arm(host, host.recipe("run-l", OLD), phase="started")
    lock_for(host, "run-other")  # broken and taken by another run (--break-lock)
    stream.close()
    state = inert_end(host, "run-l")
    assert state["ended"] == "yielded", state
    [exit_] = host.events("run-l")
    assert exit_["kind"] == "guard_exit" and exit_["status"] == "yielded", exit_
    assert "names run 'run-other', not run-l" in exit_["reason"], exit_
    assert host.daemon()[:2] == new[:2] and not host.path("hold").exists()
    assert (host.root / "current").readlink() == Path(f"releases/{NEW}")
    shown = guard.left(str(host.root), 5, mark=True)
    [run] = shown["runs"]
    [summary] = summarize(run)
    assert summary["reason"].startswith("controller lost in phase started; the host's guard "
                                        "did not act: the host lock names run 'run-other'")
    assert guard.left(str(host.root), 5, mark=True)["runs"] == []  # shown once


def test_a_guard_never_validates_with_a_bench_that_is_not_on_the_host(
    host: TwoReleases,
) -> None:
    """The previous release validated with its own command; its executable missing: failed,
    never another release's bench."""
    host.start()
    recipe = host.recipe("run-x", OLD, command="{{ release_dir }}/cuzk-bench single")
    stream = arm(host, recipe, phase="started")
    stream.close()
    end = wait_for(lambda: next((e for e in host.events("run-x") if e["kind"] == "guard_end"),
                                None))
    assert end["status"] == "failed" and end["data"]["failed"] == "validate", end
    assert "validation executable of release old0000release is not on the host" in end[
        "reason"], end
    out = ops.prove(command="", timeout=5, kill_after=1, release="zzz", require_executable=True)
    assert out["outcome"] == "no-command", out
    assert "no validation command for release zzz" in out["reason"]


def test_settled_tether_leaves_the_host_as_the_controller_left_it(host: TwoReleases) -> None:
    host.start()
    new = host.daemon()
    stream = arm(host, host.recipe("run-b", OLD))
    stream.write("phase started\nphase validated\nsettled\n")
    stream.close()
    runs = host.root / "rollout" / "runs" / "run-b"
    report = guard.report(str(host.root), "run-b", 30)
    assert report["pending"] == 0 and report["guards"][0]["settled"] is True, report
    assert host.events("run-b") == [] and summarize(report) == []
    assert (host.root / "current").readlink() == Path(f"releases/{NEW}")
    assert alive(new[0]) and (runs / f"tether.{report['guards'][0]['guard']}").exists()


def test_no_previous_release_leaves_the_host_stopped_and_held(host: TwoReleases) -> None:
    """As the controller's rollback does (one rule): the new release is stopped, the hold
    set, and the guard says so; it never starts a release that did not validate."""
    host.start()
    new = host.daemon()
    stream = arm(host, host.recipe("run-c", None), phase="started")
    stream.close()
    end = wait_for(lambda: next((e for e in host.events("run-c") if e["kind"] == "guard_end"),
                                None))
    assert end["status"] == "held" and end["data"]["rolled_back"] is False, end
    assert "NO PREVIOUS RELEASE to go back to: host left stopped and held" in end["reason"]
    assert [e["step"] for e in host.events("run-c") if e["kind"] == "step_end"] == [
        "guard-stop"]
    assert host.path("hold").exists() and not alive(new[0])
    [summary] = summarize(guard.report(str(host.root), "run-c", 5))
    assert summary["status"] == "held"
    assert "the host's guard stopped the daemon: NO PREVIOUS RELEASE" in summary["reason"]


def test_the_script_sent_is_the_inlined_one() -> None:
    text = script_text("guard")
    assert "inlined from rollout/host/scripts/common.py" in text
    assert arm_input({"a": 1}).startswith(f"{len(text.encode())}\n".encode())
    ops_text = script_text("ops").encode()
    assert arm_input({"a": 1}).endswith(b'{"a": 1}\n' + f"{len(ops_text)}\n".encode()
                                        + ops_text)


def test_validated_evidence_of_the_daemon_running_now_keeps_it() -> None:
    evidence = {"pid": 42, "starttime": 7, "release": NEW, "path": "/data/rollout/validated.json"}
    summary, steps = decide({"release": NEW, "previous": OLD},
                                  {"phase": "started", "armed": True}, evidence)
    assert steps == [] and "daemon 42 (start time 7) already passed the validation" in summary
    assert "validated.json" in summary and "nothing to do" in summary
    assert decide({"release": NEW, "previous": OLD}, {"phase": "started", "armed": True},
                  None)[1] == BACK


def test_validated_json_is_hostile_data(host: TwoReleases) -> None:
    host.start()
    pid, starttime, _ = host.daemon()
    h = guard.Host(host.recipe("run-v", OLD), ops)
    path = host.path("validated.json")
    good = {"release": NEW, "pid": pid, "starttime": starttime, "time": 1.0}
    bad: list[Any] = [
        "{not json", "[1, 2]", "null", json.dumps({**good, "pid": str(pid)}),
        json.dumps({**good, "pid": True}), json.dumps({**good, "starttime": None}),
        json.dumps({**good, "release": OLD}), json.dumps({**good, "starttime": starttime + 1}),
        json.dumps({**good, "release": ["x"]}), "\xff\xfe",
    ]
    for text in bad:
        path.write_text(text)
        assert h.validated_daemon() is None, text
    path.write_text(json.dumps(good))
    assert h.validated_daemon() == {"pid": pid, "starttime": starttime, "release": NEW,
                                    "path": str(path)}
    host.path("hold").write_text("")  # held: not serving, whatever the evidence says
    assert h.validated_daemon() is None
    host.path("hold").unlink()
    (host.root / "current").unlink()
    (host.root / "current").symlink_to(f"releases/{OLD}")
    assert h.validated_daemon() is None  # current no longer points at the release validated


def test_lost_tether_after_a_validation_the_guard_was_not_told_of_keeps_the_daemon(
    host: TwoReleases,
) -> None:
    host.start()
    pid, starttime, _ = host.daemon()
    host.path("validated.json").write_text(
        json.dumps({"release": NEW, "pid": pid, "starttime": starttime, "time": 1.0}))
    stream = arm(host, host.recipe("run-e", OLD))
    stream.write("phase switched\nphase started\n")  # never "validated"
    stream.close()
    end = wait_for(lambda: next((e for e in host.events("run-e") if e["kind"] == "guard_end"),
                                None))
    assert end["status"] == "validated" and end["data"]["acted"] is False, end
    assert f"daemon {pid} (start time {starttime}) already passed" in end["reason"], end
    assert end["data"]["evidence"]["pid"] == pid
    assert [e for e in host.events("run-e") if e["kind"] == "step_end"] == []
    assert host.daemon() [0] == pid and alive(pid)
    assert (host.root / "current").readlink() == Path(f"releases/{NEW}")
    [summary] = summarize(guard.report(str(host.root), "run-e", 5))
    assert "the host's guard did nothing" in summary["reason"], summary


def make_run(runs: Path, name: str, age_days: float, now: float, **state: Any) -> Path:
    where = runs / name
    where.mkdir(parents=True)
    (where / "state.1.json").write_text(json.dumps({"guard": "1", **state}))
    (where / "tether.1").write_text("")
    (where / "guard.jsonl").write_text("")
    when = now - age_days * 86400
    for f in [*where.iterdir(), where]:
        os.utime(f, (when, when))
    return where


def test_prune_keeps_the_newest_and_whatever_is_not_done(tmp_path: Path) -> None:
    runs, now = tmp_path / "runs", 1_000_000_000.0
    done = [make_run(runs, f"run-{i:02d}", 8 + i, now, settled=True) for i in range(25)]
    young = make_run(runs, "young", 1, now, ended="validated")
    pending = make_run(runs, "pending", 30, now, phase="started")  # neither settled nor ended
    held = make_run(runs, "held", 31, now, ended="validated")
    mine = make_run(runs, "mine", 40, now, settled=True)
    (runs / "link").symlink_to(done[-1])
    fd = os.open(held / "tether.1", os.O_RDWR)
    fcntl.flock(fd, fcntl.LOCK_EX)  # a guard still holds its tether
    try:
        removed = guard.prune_runs(str(runs), keep="mine", now=now)
    finally:
        os.close(fd)
    # newest 20 kept whatever their age: young and run-00..run-18; then the old done ones go
    assert sorted(removed) == [f"run-{i:02d}" for i in range(19, 25)], removed
    assert all(d.exists() for d in (young, pending, held, mine, *done[:19]))
    assert not any(d.exists() for d in done[19:]) and (runs / "link").is_symlink()
    # its tether free again, the held run is done like the others: past the newest 20, it goes
    assert guard.prune_runs(str(runs), keep="mine", now=now) == ["held"]
    assert guard.prune_runs(str(tmp_path / "nothing"), keep="x", now=now) == []


def test_arm_prunes_and_refuses_an_input_without_the_ops_script(host: TwoReleases) -> None:
    runs = host.root / "rollout" / "runs"
    old = [make_run(runs, f"old-{i:02d}", 10 + i, time.time(), ended="validated")
           for i in range(21)]
    stream = start(host, host.recipe("run-p", OLD), answer_key="pruned")
    # this run's folder is the newest of 22: the two oldest go
    assert sorted(stream.answer["pruned"]) == ["old-19", "old-20"], stream.answer
    assert not old[19].exists() and not old[20].exists() and old[18].exists()
    assert not (runs / "run-p" / "drain.py").exists()  # the drain is an ops action
    assert (runs / "run-p" / "ops.py").read_text() == script_text("ops")
    stream.write("settled\n")
    stream.close()
    command = f"python3 -c {shlex.quote(BOOTSTRAP)} --arm"
    bare = script_text("guard").encode()
    no_ops = f"{len(bare)}\n".encode() + bare + json.dumps(host.recipe("run-q", OLD)).encode()
    refused = LocalTransport().open_stream(command, no_ops + b"\n0\n")
    answer = json.loads(refused.readline(60))
    assert answer == {"ready": False, "reason": "no ops script after the recipe"}, answer


def test_a_failed_drain_is_reported_and_the_previous_release_restarted_all_same(
    host: TwoReleases,
) -> None:
    host.start()
    new = host.daemon()
    recipe = host.recipe("run-f", OLD, drain={"deadline": 60.0, "plateau": 0.5,
                                              "zombie_grace": 5.0, "budget": 1 << 60})
    wait_for(lambda: host.path("starts.jsonl").exists())  # the supervisor records the start
    host.path("starts.jsonl").unlink()  # no baseline recorded: only the budget can drain it
    stream = arm(host, recipe)  # a budget no limit fits: the memory never counts as back
    stream.write("phase switched\nphase started\n")
    stream.close()
    end = wait_for(lambda: next((e for e in host.events("run-f") if e["kind"] == "guard_end"),
                                None))
    steps = {e["step"]: e for e in host.events("run-f") if e["kind"] == "step_end"}
    drain = steps["guard-drain"]
    assert drain["status"] == "failed" and drain["data"]["outcome"] == "plateau", drain
    assert drain["reason"].startswith("memory stopped falling for 0.5s"), drain
    assert "restarting old0000release without waiting again" in drain["reason"], drain
    assert end["status"] == "validated" and end["data"]["failed_steps"] == {
        "drain": drain["reason"]}, end
    pid, _, exe = read_pidfile(host.root) or (0, 0, "")
    assert f"/releases/{OLD}/" in exe and alive(pid) and not alive(new[0])
    [summary] = summarize(guard.report(str(host.root), "run-f", 5))
    assert f"rolled back to {OLD}, validated; drain failed: memory stopped" in summary["reason"]


class ScriptedStream(Stream):
    """A guard's channel: answers "ready" and "armed", records what the controller writes."""

    def __init__(self) -> None:
        self.written: list[str] = []
        self.closed = False

    def readline(self, timeout: float) -> str:
        return json.dumps({"ready": True, "armed": True, "guard": "1"})

    def write(self, text: str) -> bool:
        self.written.append(text)
        return True

    @property
    def ended(self) -> bool:
        return self.closed

    def close(self) -> None:
        self.closed = True


def _plan(*kinds: str) -> Any:
    steps = [SimpleNamespace(kind=k, decision=Action(k)) for k in kinds]
    return SimpleNamespace(steps=[*steps, SimpleNamespace(kind="start", decision=Skip("runs"))])


@pytest.fixture
def opened(monkeypatch: pytest.MonkeyPatch) -> list[ScriptedStream]:
    streams: list[ScriptedStream] = []

    def _open(self: HostGuard, ctx: Any, plan: Any) -> ScriptedStream:
        streams.append(ScriptedStream())
        return streams[-1]

    monkeypatch.setattr(HostGuard, "_open", _open)
    return streams


def test_guard_started_ahead_only_for_a_plan_that_touches_the_host(
    opened: list[ScriptedStream],
) -> None:
    HostGuard("run").prepare(None, _plan("preflight", "ready", "validate"))  # type: ignore[arg-type]
    assert opened == []
    guard = HostGuard("run")
    guard.prepare(None, _plan("upload", "stop"))  # type: ignore[arg-type]
    assert len(opened) == 1 and opened[0].written == []
    guard.follow(None, None, Phase.STOPPED)  # type: ignore[arg-type]
    assert len(opened) == 1, "the stop used the guard started ahead, not a second one"
    assert guard.stream is opened[0] and opened[0].written == ["arm stopped\n"]
    guard.settle()
    assert opened[0].written[-1] == "settled\n" and opened[0].closed


def test_a_host_validated_without_a_change_gets_no_guard(opened: list[ScriptedStream]) -> None:
    """A rerun's host (or one validated again) goes from untouched to validated with nothing
    stopped, switched or started: no guard is started or armed there, and the run gives its
    lock back; a later change would still arm one first."""
    guard = HostGuard("run")
    guard.prepare(None, _plan("preflight", "ready", "validate"))  # type: ignore[arg-type]
    guard.follow(None, None, Phase.VALIDATED)  # type: ignore[arg-type]
    assert opened == [] and guard.stream is None and guard.phase is Phase.VALIDATED
    guard.settle()
    assert guard.drop() is False and not guard.lost
    changed = HostGuard("run")
    changed.follow(None, None, Phase.STARTED)  # type: ignore[arg-type]
    assert len(opened) == 1 and opened[0].written == ["arm started\n"]


def test_guard_started_ahead_for_a_host_that_stayed_untouched_is_settled(
    opened: list[ScriptedStream],
) -> None:
    """The host failed (or was cut short) before its first stop: nothing to take back, so
    the guard must not take over (it would stop and restart a host nobody touched)."""
    guard = HostGuard("run")
    guard.prepare(None, _plan("stop"))  # type: ignore[arg-type]
    guard.drop()
    assert opened[0].written == ["settled\n"] and opened[0].closed
    assert not guard.lost


def test_guard_started_ahead_is_settled_only_once_it_said_ready(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A host refused at once: its guard, still starting, is told "settled" only after its
    "ready" (it has written its state), never closed half started."""
    said: list[str] = []

    class Starting(ScriptedStream):
        def readline(self, timeout: float) -> str:
            said.append("read")
            return super().readline(timeout)

        def write(self, text: str) -> bool:
            said.append(text)
            return super().write(text)

    monkeypatch.setattr(HostGuard, "_open", lambda self, ctx, plan: Starting())
    guard = HostGuard("run")
    guard.prepare(None, _plan("stop"))  # type: ignore[arg-type]
    guard.settle()
    assert said == ["read", "settled\n"]


def test_guard_started_ahead_on_a_connection_since_dropped_is_started_again(
    opened: list[ScriptedStream],
) -> None:
    guard = HostGuard("run")
    guard.prepare(None, _plan("stop"))  # type: ignore[arg-type]
    opened[0].closed = True  # the connection dropped (an upload cut), and came back
    guard.follow(None, None, Phase.STOPPED)  # type: ignore[arg-type]
    assert len(opened) == 2 and guard.stream is opened[1]
    assert not guard.lost


class Answers(ScriptedStream):
    """A guard's channel answering with the given lines, in order."""

    def __init__(self, *lines: str) -> None:
        super().__init__()
        self.lines = list(lines)

    def readline(self, timeout: float) -> str:
        return self.lines.pop(0) if self.lines else ""


@pytest.mark.parametrize(
    ("lines", "why"),
    [
        (['{"ready": false, "reason": "an earlier guard is still taking over"}'],
         "an earlier guard is still taking over"),
        (['{"ready": true, "guard": "1"}'], "no answer"),  # armed never acknowledged
        (['{"ready": true, "guard": "1"}', '{"armed": "yes"}'], '{"armed": "yes"}'),
        (["not json"], "not json"),
    ],
)
def test_the_host_changes_only_once_its_guard_said_armed(
    monkeypatch: pytest.MonkeyPatch, lines: list[str], why: str
) -> None:
    stream = Answers(*lines)
    monkeypatch.setattr(HostGuard, "_open", lambda self, ctx, plan: stream)
    guard = HostGuard("run")
    with pytest.raises(StepFailed, match=f"did not start \\({re.escape(why)}\\): nothing was"):
        guard.follow(None, None, Phase.STOPPED)  # type: ignore[arg-type]
    assert stream.closed and guard.stream is None
    assert not guard.drop(), "never armed: nothing handed over, the lock is given back"


def test_a_dropped_armed_tether_hands_the_host_over_and_keeps_its_lock(
    opened: list[ScriptedStream], monkeypatch: pytest.MonkeyPatch
) -> None:
    guard = HostGuard("run")
    guard.follow(None, None, Phase.STOPPED)  # type: ignore[arg-type]
    assert opened[0].written == ["arm stopped\n"]
    assert guard.drop() is True  # not settled: handed over
    settled = HostGuard("run")
    settled.follow(None, None, Phase.STARTED)  # type: ignore[arg-type]
    settled.settle()
    assert settled.drop() is False
    locks = FleetLocks(Holder("run", "op", "ctl", 1, 0.0, "v"), LockPolicy(),
                       LockEvents(print, print, print, print))
    given: list[str] = []
    monkeypatch.setattr(locks_module, "release_host_lock", lambda ctx, me: given.append(ctx.name))
    for name in ("a", "b"):
        locks.held[name] = SimpleNamespace(  # type: ignore[assignment]
            name=name, transport=SimpleNamespace(close=lambda: None))
    locks.keep("b")
    locks.release()
    assert given == ["a"], "the lock of a host handed to its guard stays on the host"


class LeftHost(SimpleNamespace):
    def __init__(self, answers: list[dict[str, Any]]) -> None:
        super().__init__(name="h1", layout=SimpleNamespace(root="/data"), calls=[])
        self.answers = answers

    def script(self, name: str, *args: object, timeout: float | None = None) -> tuple[int, Any]:
        self.calls.append([str(a) for a in args])
        return 0, self.answers.pop(0)


def test_guards_left_waits_says_so_and_shows_what_they_did() -> None:
    took_over = {"run": "run-old", "guards": [{"guard": "7", "phase": "stopped",
                                               "ended": "validated"}],
                 "events": [{"kind": "guard_end", "status": "validated", "reason": "x",
                             "data": {"guard": "7", "release": OLD, "rolled_back": True,
                                      "acted": True}}]}
    host = LeftHost([{"busy": ["run-old"], "runs": []}, {"busy": [], "runs": [took_over]}])
    bus = EventBus("run-new")
    seen: list[Any] = []
    bus.subscribe(seen.append)
    guards_left(host, bus, "run-new", wait=30)  # type: ignore[arg-type]
    assert [c[-2:] for c in host.calls] == [["0.0", "--mark"], ["30", "--mark"]]
    note, report = [e for e in seen if e.kind in ("note", "guard_report")]
    assert "waiting up to 30s for the guard(s) of run(s) run-old" in note.reason
    assert report.reason == ("guard of run run-old: controller lost in phase stopped; the "
                             f"host's guard rolled back to {OLD}, validated")
    still = LeftHost([{"busy": ["run-old"], "runs": []}, {"busy": ["run-old"], "runs": []}])
    with pytest.raises(StepFailed, match="still at the host after 30s: not touched"):
        guards_left(still, bus, "run-new", wait=30)  # type: ignore[arg-type]


def test_summary_leaves_out_guards_that_never_acted() -> None:
    report = {"guards": [{"guard": "1", "phase": "untouched", "ended": "inert"},
                         {"guard": "2", "settled": True}], "events": []}
    assert summarize(report) == []


@pytest.mark.parametrize(
    "report",
    [
        {"guards": "x", "events": 7},
        {"guards": [{"guard": "1", "phase": ["x"]}], "events": [{"kind": "guard_end",
                                                               "data": ["not", "a", "dict"]}]},
        {"guards": [{"guard": "1"}], "events": [{"kind": "guard_end", "status": {"a": 1},
                                                 "data": {"guard": "1", "failed_steps": [1],
                                                          "release": 5}}]},
        {"guards": [None, 3, {"guard": "1", "ended": "yielded"}],
         "events": [None, {"kind": "guard_exit", "reason": "[bold]x[/bold]" * 500,
                           "data": {"guard": "1"}}]},
    ],
)
def test_what_a_host_says_its_guards_did_is_hostile_data(report: dict[str, Any]) -> None:
    for summary in summarize(report):
        assert isinstance(summary["reason"], str) and len(summary["reason"]) < 1500, summary
        assert isinstance(summary["status"], str)
    host = LeftHost([{"busy": {"x": 1}, "runs": [report, "junk", {"run": ["r"], **report}]}])
    guards_left(host, EventBus("run-new"), "run-new")  # type: ignore[arg-type]


def test_status_shows_what_guards_did_until_a_run_shows_it(
    capsys: pytest.CaptureFixture[str],
) -> None:
    from rollout.commands.status import print_status

    took_over = {"run": "run-old", "guards": [{"guard": "7", "phase": "started",
                                               "ended": "failed"}],
                 "events": [{"kind": "guard_end", "status": "failed", "reason": "ready failed",
                             "data": {"guard": "7", "release": OLD}}]}
    host = LeftHost([{"busy": ["run-now"], "runs": [took_over]}])
    lines = guard_module.left_lines(host)  # type: ignore[arg-type]
    assert host.calls == [["--left", "--root", "/data", "--wait", "0.0"]], "read only"
    assert lines == ["guard of run run-old: controller lost in phase started; the host's guard "
                     f"FAILED: ready failed; current -> {OLD}"]
    row = {"host": "h1", "state": "dead", "serving": False, "guards": lines}
    print_status([row], as_json=False)
    assert f"h1  guard  {lines[0]}" in capsys.readouterr().out


def test_a_guard_tethered_to_its_live_controller_is_busy_and_not_reported(
    host: TwoReleases,
) -> None:
    """status while a run is in progress: its armed guard did nothing to report."""
    host.start()
    stream = arm(host, host.recipe("run-live", OLD), phase="started")
    try:
        assert guard.left(str(host.root), 0, mark=True) == {"busy": ["run-live"], "runs": []}
    finally:
        stream.close()  # now the controller is gone: the guard takes over
    shown = guard.left(str(host.root), 120, mark=True)  # waits for the takeover to end
    assert shown["busy"] == [] and [r["run"] for r in shown["runs"]] == ["run-live"], shown
    [summary] = summarize(shown["runs"][0])
    assert summary["status"] == "validated", summary
    assert (host.root / "rollout" / "runs" / "run-live" / "shown").exists()
