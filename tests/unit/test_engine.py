"""The engine without Docker or root: fake hosts serve facts and record what is sent.

Table tests: a failure at each phase and its rollback, a prune failure after validation,
canary abort, max_fail_percentage, resume, revert on abort, and the skip rules, where the
dry run prints exactly what the engine then does.
"""

from __future__ import annotations

import re
from dataclasses import replace
from functools import cache
from pathlib import Path
from typing import Any

import pytest
from fakehost import STAGING, FakeHost, sha

from rollout.commands.dryrun import print_host_plans
from rollout.config.inventory import Host, Inventory
from rollout.config.playbook import LAB_PLAYBOOK, parse_set_options
from rollout.engine.hostplan import digest_paths, plan_host
from rollout.engine.plan import Plan, make_plan, new_run_id
from rollout.engine.run import Engine, EngineOptions, RunSummary
from rollout.output.events import Event, EventBus
from rollout.steps.base import HostContext
from rollout.steps.decision import Artifact, Phase, Release
from rollout.steps.kinds import load_playbook, preflight

OLD, NEW = "aaaaaaaaaaaa", "bbbbbbbbbbbb"
OLDER = ("111111111111", "222222222222", "333333333333")


def crowd(host: FakeHost) -> None:
    """Older releases on the host, so that the prune after this rollout removes some."""
    host.releases = {**{r: {} for r in OLDER}, **host.releases}


def release(tmp_path: Path, rid: str) -> Release:
    artifacts = []
    for name in ("cuzk-daemon", "cuzk-bench"):
        path = tmp_path / f"{rid}-{name}"
        path.write_bytes(f"{name} of {rid}".encode())
        artifacts.append(Artifact(name, str(path), sha(path.read_bytes()), path.stat().st_size))
    return Release(rid, "img", rid, tuple(artifacts))


@cache
def planned(sets: tuple[str, ...], names: tuple[str, ...], cordon: bool = False) -> Plan:
    """The lab playbook with these --set values, planned for hosts of these names: loaded
    and rendered once a module (both pure; about 0.2 s of CPU each), each roll a new run.
    Without the lab's curio cordon unless `cordon` (a fake host runs no curio, and the
    wait after a cordon looks twice, a second apart: a second of every host's stop)."""
    off = {} if cordon else {"work.cordon": None, "work.uncordon": None}
    playbook = load_playbook(LAB_PLAYBOOK, overrides=parse_set_options(sets), settings=off)
    hosts = [Host(n, "127.0.0.1", 22, "root", None, Path("/k"), "strict", 10, (), {})
             for n in names]
    return make_plan(playbook, Inventory(Path("fleet.yaml"), hosts), None)


class Fleet:
    """Fake hosts, and rollouts of fake releases onto them."""

    def __init__(self, tmp_path: Path, names: list[str], *sets: str, cordon: bool = False
                 ) -> None:
        self.tmp = tmp_path
        self.hosts = {n: FakeHost(n) for n in names}
        self.sets = sets
        self.cordon = cordon
        self.events: list[Event] = []

    def plan(self, *sets: str) -> Plan:
        sets = ("params_files=[]", "pce_bytes=0", *self.sets, *sets)  # no params on fake hosts
        first = planned(sets, tuple(self.hosts), self.cordon)
        return replace(first, run_id=new_run_id(), hosts=list(first.hosts),
                       batches=[list(b) for b in first.batches],
                       _per_host=dict(first._per_host))

    def roll(self, rid: str, *sets: str, **options: Any) -> RunSummary:
        plan = self.plan(*sets)
        bus = EventBus(plan.run_id)
        bus.subscribe(self.events.append)
        self.events.clear()
        opts = EngineOptions(release=release(self.tmp, rid), **options)
        return Engine(plan, bus, lambda h: self.hosts[h.name], self.tmp, opts).run()

    def serving(self, rid: str) -> Fleet:
        """Every host validated on release `rid` (rolled there by the engine itself)."""
        assert self.roll(rid).exit_code == 0
        return self

    def ends(self) -> list[tuple[str, str]]:
        return [(e.host or "", e.status or "") for e in self.events if e.kind == "host_end"]

    def steps(self, host: str) -> dict[str, Event]:
        return {e.step or "": e for e in self.events if e.kind == "step_end" and e.host == host}


@pytest.fixture
def fleet(tmp_path: Path) -> Fleet:
    return Fleet(tmp_path, ["h1", "h2", "h3"]).serving(OLD)


def test_onto_empty_hosts_then_a_new_release(fleet: Fleet) -> None:
    summary = fleet.roll(NEW)
    assert summary.exit_code == 0
    assert sorted(fleet.ends()) == [(h, "validated") for h in fleet.hosts]
    for host in fleet.hosts.values():
        assert (host.current, host.daemon, host.held, host.previous) == (NEW, NEW, False, OLD)
        assert set(host.releases) == {OLD, NEW}
        assert not host.staged()  # nothing left in the staging folder
    # the canary uploads in its batch; the later batch's hosts were staged during it
    assert fleet.hosts["h1"].commands(r"^put /data/releases/\.partial-")
    for name in ("h2", "h3"):
        assert fleet.hosts[name].commands(rf"^put {STAGING}/{NEW}/")
        assert not fleet.hosts[name].commands(r"^put /data/releases/")
        assert "staged during the canary" in (fleet.steps(name)["upload"].reason or "")
        assert fleet.steps(name)["switch"].data["checked"] == "identity"
    staged = [e for e in fleet.events if e.kind == "staged"]
    assert sorted((e.host, e.status) for e in staged) == [("h2", "ok"), ("h3", "ok")]
    steps = fleet.steps("h2")
    assert list(steps) == [s.name for s in fleet.plan().host_steps]
    assert {"preflight", "upload", "stop", "drain", "switch", "start", "validate"} <= set(steps)
    assert steps["supervise"].status == "skipped" and steps["stop"].status == "changed"


def test_rerun_changes_nothing(fleet: Fleet) -> None:
    for host in fleet.hosts.values():
        host.sent.clear()
    assert fleet.roll(OLD).exit_code == 0
    for host in fleet.hosts.values():
        assert not host.commands(r"^put |^call ops\.(hold|stop|start|point_current) |cat > ")
    statuses = {k: e.status for k, e in fleet.steps("h1").items()}
    skipped = ["supervise", "upload", "config", "stop", "drain", "switch", "start", "prune"]
    assert all(statuses[k] == "skipped" for k in skipped), statuses
    assert "already runs release" in fleet.steps("h1")["drain"].reason  # type: ignore[operator]


BACK = ["stop", "drain", "switch", "start", "ready", "validate"]
"""A rollback's steps; its switch (current back, with its config) is no step event of its own."""


@pytest.mark.parametrize(
    ("fault", "phase", "status", "rollback"),
    [
        ("preflight", Phase.UNTOUCHED, "skipped", []),
        ("stop", Phase.STOPPED, "rolled_back", BACK),
        ("drain", Phase.STOPPED, "rolled_back", ["stop", "switch", "start", "ready", "validate"]),
        ("switch", Phase.SWITCHED, "rolled_back", BACK),
        ("start", Phase.STARTED, "rolled_back", BACK),
        ("ready", Phase.STARTED, "rolled_back", BACK),
        ("validate", Phase.STARTED, "rolled_back", BACK),
        ("prune", Phase.VALIDATED, "validated", []),
    ],
)
def test_a_failure_at_each_phase_and_its_rollback(
    fleet: Fleet, fault: str, phase: Phase, status: str, rollback: list[str]
) -> None:
    host = fleet.hosts["h1"]
    host.faults, host.bad_release = {fault}, NEW
    crowd(host)
    planned = _plan_of(fleet, "h1", NEW)
    failing = next(s for s in planned.steps if s.kind == fault)
    assert failing.rollback is not None
    assert list(failing.rollback.kinds) == rollback
    assert planned.rollback_at(phase, fault) == failing.rollback
    summary = fleet.roll(NEW)
    assert summary.outcomes["h1"].status == status, summary.outcomes["h1"]
    ran = [s.removeprefix("rollback-") for s in fleet.steps("h1") if s.startswith("rollback-")]
    assert ran == rollback  # the switch back is a step like the others
    assert fleet.steps("h1")[fault].status == "failed"
    want = NEW if status == "validated" else OLD
    assert (host.current, host.daemon, host.held) == (want, want, False)
    assert summary.aborted == "canary batch failed: rollout stopped" or status == "validated"


def test_prune_failure_after_validation_is_a_warning_not_a_rollback(fleet: Fleet) -> None:
    fleet.hosts["h1"].faults, fleet.hosts["h1"].bad_release = {"prune"}, NEW
    crowd(fleet.hosts["h1"])
    summary = fleet.roll(NEW)
    assert summary.exit_code == 0, summary.outcomes
    warning = next(e for e in fleet.events if e.kind == "warning")
    assert warning.host == "h1" and "prune failed" in (warning.reason or "")
    assert "WARNING: prune failed" in summary.outcomes["h1"].reason


def test_canary_failure_stops_the_rollout_before_other_hosts(fleet: Fleet) -> None:
    fleet.hosts["h1"].faults, fleet.hosts["h1"].bad_release = {"validate"}, NEW
    for host in fleet.hosts.values():
        host.sent.clear()
    summary = fleet.roll(NEW)
    assert summary.aborted == "canary batch failed: rollout stopped"
    assert fleet.ends() == [("h1", "rolled_back")]
    assert {n: o.status for n, o in summary.outcomes.items()} == {
        "h1": "rolled_back", "h2": "not_started", "h3": "not_started"}
    for name in ("h2", "h3"):  # staged during the canary, then cleared: left as found
        host = fleet.hosts[name]
        assert not host.staged()
        staging = (r"^call ops\.(staging_survey|identities|unstage) ", rf"{STAGING}/{NEW}")
        assert all(re.search(staging[0], c) or staging[1] in c for c in host.sent), host.sent
        assert host.commands(rf'^call ops\.unstage {{"release": "{NEW}", "root": "/data"}}')
    assert not any(e.kind == "step_start" and e.host in ("h2", "h3") for e in fleet.events)


@pytest.mark.parametrize(("bad", "aborted"), [(["h2"], False), (["h2", "h3"], True)])
def test_max_fail_percentage(tmp_path: Path, bad: list[str], aborted: bool) -> None:
    fleet = Fleet(tmp_path, ["h1", "h2", "h3", "h4"], "serial=[1, 2, 1]",
                  "max_fail_percentage=30").serving(OLD)
    for name in bad:
        fleet.hosts[name].faults, fleet.hosts[name].bad_release = {"validate"}, NEW
    summary = fleet.roll(NEW)
    assert bool(summary.aborted) == aborted, summary.aborted
    assert summary.outcomes["h4"].status == ("not_started" if aborted else "validated")
    assert summary.exit_code == 1
    if aborted:
        assert "exceed max_fail_percentage 30" in (summary.aborted or "")


def test_resume_skips_hosts_still_serving_what_the_run_validated(fleet: Fleet) -> None:
    assert fleet.roll(NEW).exit_code == 0
    fleet.hosts["h2"].daemon = None  # died since: resumed, it is rolled again
    for host in fleet.hosts.values():
        host.sent.clear()
    summary = fleet.roll(NEW, done_hosts=frozenset({"h1", "h2"}))
    assert summary.exit_code == 0
    assert "(resumed)" in summary.outcomes["h1"].reason
    assert "(resumed)" not in summary.outcomes["h2"].reason
    assert len(fleet.hosts["h1"].sent) == 1  # the facts, nothing else
    assert fleet.hosts["h2"].commands(r"^call ops\.stop ")


def test_revert_on_abort_takes_validated_hosts_back(fleet: Fleet) -> None:
    fleet.hosts["h2"].faults, fleet.hosts["h2"].bad_release = {"validate"}, NEW
    summary = fleet.roll(NEW, "serial=[1]", "rollback_on_abort=all")
    assert summary.exit_code == 1
    assert fleet.ends() == [("h1", "validated"), ("h2", "rolled_back"), ("h1", "rolled_back")]
    for name in ("h1", "h2"):
        host = fleet.hosts[name]
        assert (host.current, host.daemon, host.held) == (OLD, OLD, False)
    assert fleet.hosts["h3"].current == OLD and summary.outcomes["h3"].status == "not_started"


def _plan_of(fleet: Fleet, name: str, rid: str) -> Any:
    plan = fleet.plan()
    ctx = HostContext(plan.host(name), fleet.hosts[name], _layout(), plan.settings_for(name),
                      release(fleet.tmp, rid))
    return plan_host(ctx.facts(*digest_paths(ctx.target)), ctx.target, plan.host_steps)


def _layout() -> Any:
    from rollout.host.layout import Layout

    return Layout("/data")


def _printed_decisions(printed: str, host: str) -> dict[str, tuple[str, str]]:
    """{step: ("skip", reason) or ("run", summary)} from one host's dry run lines."""
    lines = printed.split(f"  {host}: ", 1)[1].split("\n  h")[0].splitlines()[1:]
    out = {}
    for line in lines:
        if " would " in line and not line.startswith("      "):
            step = line.split()[0]
            verb, _, text = line.split(" would ", 1)[1].partition(": ")
            out[step] = ("skip" if verb == "skip" else "run", text)
    return out


@pytest.mark.parametrize("case", ["rerun", "new release", "held with a dead daemon"])
def test_dry_run_prints_exactly_what_the_engine_does(
    fleet: Fleet, case: str, capsys: pytest.CaptureFixture[str]
) -> None:
    rid = OLD if case == "rerun" else NEW
    if case == "held with a dead daemon":
        assert fleet.roll(NEW).exit_code == 0
        fleet.hosts["h1"].daemon, fleet.hosts["h1"].held = None, True
    target = _plan_of(fleet, "h1", rid).target
    reads = {f.name for f in preflight.facts_of(target, list(preflight.CHECKS))}
    before = {n: len(h.sent) for n, h in fleet.hosts.items()}
    print_host_plans(fleet.plan(), lambda h: fleet.hosts[h.name], release(fleet.tmp, rid))
    printed = capsys.readouterr().out
    for name, host in fleet.hosts.items():  # a dry run only reads: the facts, in one batch
        for sent in host.sent[before[name]:]:
            assert sent.startswith(("call ops.facts ", "call ops.batch ")) or (
                sent.startswith("batched ") and sent.split()[1] in reads), sent
    assert fleet.roll(rid).exit_code == 0
    for name in fleet.hosts:
        planned = _printed_decisions(printed, name)
        assert set(planned) == set(fleet.steps(name))
        for step, event in fleet.steps(name).items():
            verb, text = planned[step]
            if verb == "skip":
                assert (event.status, event.reason) == ("skipped", text)
            else:  # it ran: a stop that found no daemon says so, having set the hold
                assert event.status != "skipped" or event.reason.startswith("hold set")


def test_every_rollback_plan_is_decided_from_the_phase_alone(fleet: Fleet) -> None:
    crowd(fleet.hosts["h1"])
    planned = _plan_of(fleet, "h1", NEW)
    by_kind = {s.kind: s.rollback for s in planned.steps}
    assert by_kind["preflight"].kinds == () and not by_kind["preflight"].rolled_back
    assert by_kind["stop"].to == OLD and by_kind["validate"].to == OLD
    assert by_kind["prune"].warning


def _kinds(fleet: Fleet, name: str) -> dict[str, str]:
    return {k: e.status or "" for k, e in fleet.steps(name).items()}


def test_rerun_rests_on_the_evidence_of_the_same_daemon(fleet: Fleet) -> None:
    evidence = dict(fleet.hosts["h1"].validated)
    assert evidence["release"] == OLD and evidence["pid"] == fleet.hosts["h1"].pid
    for host in fleet.hosts.values():
        host.sent.clear()
    assert fleet.roll(OLD).exit_code == 0
    for host in fleet.hosts.values():  # guards left? the facts; the later hosts' staging
        assert all(c.startswith(("call ops.facts ", "python3 - --left --root /data ",
                                 "call ops.staging_survey ")) for c in host.sent), host.sent
    assert {e.status for e in fleet.events if e.kind == "staged"} == {"skipped"}
    statuses = _kinds(fleet, "h1")
    assert all(s == "skipped" for s in statuses.values()), statuses
    validate = fleet.steps("h1")["validate"]
    assert f"daemon {evidence['pid']} (start time 1) already passed the validation" in str(
        validate.reason)
    assert validate.data["evidence"]["pid"] == evidence["pid"]
    assert "changes nothing" in str(fleet.steps("h1")["preflight"].reason)
    assert fleet.hosts["h1"].validated == evidence  # nothing rewrote it


@pytest.mark.parametrize(
    "evidence",
    [
        "another daemon (pid)",
        "another daemon (start time)",
        "another release",
        "hostile: pid is a string",
        "hostile: not an object",
        "none",
    ],
)
def test_rerun_validates_again_without_evidence_of_this_daemon(fleet: Fleet, evidence: str
                                                              ) -> None:
    host = fleet.hosts["h1"]
    good = dict(host.validated)
    host.validated = {
        "another daemon (pid)": {**good, "pid": good["pid"] + 1},
        "another daemon (start time)": {**good, "starttime": 2},
        "another release": {**good, "release": NEW},
        "hostile: pid is a string": {**good, "pid": str(good["pid"])},
        "hostile: not an object": "$(reboot)",
        "none": None,
    }[evidence]
    host.sent.clear()
    assert fleet.roll(OLD).exit_code == 0
    statuses = _kinds(fleet, "h1")
    assert (statuses["ready"], statuses["validate"]) == ("ok", "ok"), statuses
    assert statuses["preflight"] == "skipped"  # still nothing changes on the host
    assert host.commands(r"cuzk-bench")
    assert {**host.validated, "time": 0} == {**good, "time": 0}  # it names this daemon again
    assert _kinds(fleet, "h2")["validate"] == "skipped"


def test_evidence_never_skips_a_step_after_one_that_acts(fleet: Fleet) -> None:
    host = fleet.hosts["h1"]
    host.files["/data/rollout/supervisor.conf.json"] = "changed by hand"
    assert fleet.roll(OLD).exit_code == 0
    statuses = _kinds(fleet, "h1")
    assert statuses["supervise"] == "changed"
    assert (statuses["preflight"], statuses["ready"], statuses["validate"]) == ("ok", "ok", "ok")
    assert _kinds(fleet, "h2")["validate"] == "skipped"


def test_a_new_daemon_is_validated_and_its_evidence_replaces_the_old(fleet: Fleet) -> None:
    before = dict(fleet.hosts["h1"].validated)
    assert fleet.roll(NEW).exit_code == 0
    after = fleet.hosts["h1"].validated
    assert after["release"] == NEW and after["pid"] != before["pid"]
    assert _kinds(fleet, "h1")["validate"] == "ok"


def test_a_failed_validation_leaves_no_evidence(tmp_path: Path) -> None:
    fleet = Fleet(tmp_path, ["h1"]).serving(OLD)
    host = fleet.hosts["h1"]
    host.faults, host.bad_release = {"validate"}, NEW
    assert fleet.roll(NEW).exit_code == 1
    assert host.validated is not None and host.validated["release"] == OLD  # the rollback's
    assert host.validated["pid"] == host.pid


FACTS_READ = r'^call ops\.facts \{.*"root": "/data"\}$'


def test_the_first_preflight_checks_the_facts_the_plan_was_decided_from(fleet: Fleet) -> None:
    host = fleet.hosts["h2"]
    host.sent.clear()
    assert fleet.roll(NEW).exit_code == 0
    first_put = next(i for i, c in enumerate(host.sent)  # the upload installs the staged files
                     if c.startswith("call ops.install_release "))
    reads = [c for c in host.sent[:first_put] if re.match(FACTS_READ, c)]
    assert len(reads) == 1, host.sent[:first_put]  # the plan's read, nothing since acted
    ldd = next(i for i, c in enumerate(host.sent) if c.startswith("call ops.ldd "))
    assert ldd > first_put and f'"directory": "/data/releases/{NEW}"' in host.sent[ldd]
    between = [c for c in host.sent[first_put:ldd] if re.match(FACTS_READ, c)]
    assert not between, "after the upload, the executables check looks for itself: no facts"
    assert host.commands(r"^call ops\.stop ") and not host.commands(r"^call ops\.hold ")
    # the hold and the stop in one round trip (ops.stop sets the hold first)


def test_the_lab_playbooks_cordon_comes_before_the_stop_and_is_undone_at_the_end(
    tmp_path: Path
) -> None:
    fleet = Fleet(tmp_path, ["h1"]).serving(OLD)
    host = fleet.hosts["h1"]
    host.sent.clear()
    fleet.cordon = True  # the lab playbook as it is: `curio cordon` before each stop
    assert fleet.roll(NEW).exit_code == 0
    calls = [c.split(" ")[1] for c in host.sent if c.startswith("call ")]
    cordoned = calls.index("ops.cordon")
    # the cordon's call brings the first look; an idle daemon is looked at every IDLE_POLL
    # until the cordon can have taken effect (the lab playbook's work.cordon_takes, 2 s:
    # none), then the stop, whose own look is the last
    stop = calls.index("ops.stop")
    assert cordoned < stop and calls[cordoned + 1:stop] == []
    assert '"status_url": "http://' in next(c for c in host.sent if "ops.cordon" in c)
    assert calls.count("ops.uncordon") == 1 and calls.index("ops.uncordon") > max(
        i for i, c in enumerate(calls) if c == "ops.start")
    cordon = next(c for c in host.sent if c.startswith("call ops.cordon "))
    assert '"command": "curio cordon"' in cordon


def test_ready_and_validate_take_three_round_trips(fleet: Fleet) -> None:
    host = fleet.hosts["h1"]
    host.sent.clear()
    assert fleet.roll(NEW).exit_code == 0
    started = max(i for i, c in enumerate(host.sent) if c.startswith("call ops.start "))
    after = host.sent[started + 1:]
    assert len(after) == 3, after  # nothing else between the start and the end of validate
    ready, checks, proof = after
    assert ready.startswith("call ops.wait_ready ") and '"grpc_url": ' in ready  # one process
    assert '"status_url": ' in ready and '"ports": [' in ready  # then the ports' owners
    assert checks.startswith("call ops.probe ") and '"/data/32gbench/c1.json"' in checks
    assert "/status" in checks  # the input, /status and
    assert '"ports": [9821, 9820]' in checks  # the ports' owners before the proof, one call
    assert proof.startswith("call ops.prove ") and "cuzk-bench" in proof
    assert host.validated["release"] == NEW  # the proof's own trip wrote the evidence


CONFIG = "/data/zk/cuzk.toml"


@pytest.mark.parametrize("fault", ["preflight", "stop", "drain", "switch"])
def test_a_host_refused_or_rolled_back_keeps_the_config_its_release_ran_with(
    fleet: Fleet, fault: str
) -> None:
    """The config step writes the new config only once the host is stopped (its phase is
    stopped, after the stop and the drain): a host refused before (preflight) never sees it,
    and one rolled back gets back the config its release ran with."""
    host = fleet.hosts["h1"]
    before = host.files[CONFIG]
    host.faults, host.bad_release = {fault}, NEW
    summary = fleet.roll(NEW, "lab_knobs={pool_mib: 7}")  # a config of its own
    assert summary.outcomes["h1"].status in ("skipped", "rolled_back"), summary.outcomes["h1"]
    config = fleet.steps("h1").get("config")
    if fault == "switch":  # written once the host was stopped; put back by the rollback
        assert config is not None and config.status == "changed", config
    else:
        assert config is None or config.status == "skipped", config
    assert host.files[CONFIG] == before and host.current == OLD


def test_preflights_reads_go_to_the_host_in_one_round_trip(fleet: Fleet) -> None:
    host = fleet.hosts["h1"]
    host.sent.clear()
    assert fleet.roll(NEW).exit_code == 0
    batches = [c for c in host.sent if c.startswith("call ops.batch ")]
    batched = [c.split(" ")[1] for c in host.sent if c.startswith("batched ")]
    assert len(batches) == 1 and batched == ["file_present", "check_root", "ldd", "input_check"]
    assert not host.commands(r"^call ops\.(file_present|input_check) ")
