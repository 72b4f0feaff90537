"""The operator's second day (issue 29, small frictions): the .prom file node_exporter can
read, status's exit when hosts are down, a lock's way out through --resume, the cordon hint
of a wait that gave up, plain tables off a terminal, `report latest`, rollback's own title,
and a config step before the stop that loads with a warning and runs after it."""

from __future__ import annotations

import io
import os
import socket
import stat
from pathlib import Path
from typing import Any

import pytest
from conftest import CliResult, CliRunner
from fakehost import FakeHost
from rich.console import Console
from test_engine import NEW, release
from test_reports import _run
from test_work import RUNNING, Clock, scripted_context, status

from rollout.commands import app
from rollout.commands import status as health
from rollout.config.inventory import Host, Inventory
from rollout.config.playbook import parse_set_options
from rollout.config.steps import corrected_order
from rollout.engine.hostplan import RULES
from rollout.engine.locks import FoundLock, Holder, LockPolicy, _refusal
from rollout.engine.outcome import HostOutcome, RunSummary
from rollout.engine.plan import make_plan
from rollout.engine.run import Engine, EngineOptions
from rollout.errors import ConfigError, StepFailed, UserError
from rollout.output.console import print_summary, print_table
from rollout.output.events import Event, EventBus
from rollout.output.journal import latest_run
from rollout.reports import prom
from rollout.reports.output import write_atomic
from rollout.steps.kinds import load_playbook
from rollout.steps.work import before_stop, work_how

REPO = Path(__file__).resolve().parents[2]
BOX = set("─━│┃┌┏┐┓└┗┘┛├┣┤┫┬┳┴┻┼╋╇╈╀╁╂┡┩╍╸╹╺╻")
ROWS = [{"host": "lab-1", "state": "running", "serving": True},
        {"host": "lab-2", "state": "dead", "serving": False},
        {"host": "lab-3", "state": "unreachable", "serving": False, "error": "refused"}]


# 1. the .prom file

def test_the_prom_file_is_world_readable_whatever_the_umask(tmp_path: Path) -> None:
    path = tmp_path / "textfile" / "rollout.prom"
    old = os.umask(0o077)
    try:
        prom.write(path, ROWS, 1.0)
    finally:
        os.umask(old)
    assert stat.S_IMODE(path.stat().st_mode) == 0o644
    assert "rollout_host_up" in path.read_text()
    write_atomic(tmp_path / "report.md", "x")  # reports stay the owner's alone
    assert stat.S_IMODE((tmp_path / "report.md").stat().st_mode) == 0o600


def test_the_prom_file_is_replaced_whole_through_a_synced_temporary(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "rollout.prom"
    path.write_text("old\n")
    before = path.stat().st_ino
    seen: dict[str, Any] = {"synced": []}
    real_fsync, real_replace = os.fsync, os.replace

    def fsync(fd: int) -> None:
        seen["synced"].append(os.fstat(fd).st_size)
        real_fsync(fd)

    def replace(src: Any, dst: Any) -> None:
        seen["src"], seen["text_then"] = Path(src), Path(dst).read_text()
        seen["src_text"] = Path(src).read_text()
        real_replace(src, dst)

    monkeypatch.setattr(os, "fsync", fsync)
    monkeypatch.setattr(os, "replace", replace)
    prom.write(path, ROWS, 1.0)
    assert seen["src"].parent == tmp_path and seen["src"] != path  # same folder: a rename
    assert seen["text_then"] == "old\n"  # a reader saw the old file whole until the rename
    assert seen["src_text"] == path.read_text() and seen["synced"][-1] == len(path.read_bytes())
    assert path.stat().st_ino != before and sorted(tmp_path.iterdir()) == [path]


def test_the_prom_file_is_never_written_through_a_link(tmp_path: Path) -> None:
    target = tmp_path / "shadow"
    target.write_text("keep\n")
    link = tmp_path / "rollout.prom"
    link.symlink_to(target)
    with pytest.raises(UserError, match="symbolic link"):
        prom.write(link, ROWS, 1.0)
    assert target.read_text() == "keep\n" and link.is_symlink()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["rollout.prom", "shadow"]


# 2. status's exit code

def test_status_exits_1_naming_the_hosts_down_unless_a_minimum_tolerates_them(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert health.check_capacity(ROWS, None) == 1
    err = capsys.readouterr().err
    assert "2 of 3 hosts dead or unreachable: lab-2 (dead), lab-3 (unreachable)" in err
    assert "--min-capacity" in err
    assert health.check_capacity(ROWS, 0.3) == 0 and health.check_capacity(ROWS, 0.0) == 0
    assert health.check_capacity(ROWS, 0.5) == 1
    up = [ROWS[0], {"host": "lab-4", "state": "held", "serving": False}]
    assert health.check_capacity(up, None) == 0  # held on purpose: not down


def status_cli(cli: CliRunner, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
               rows: list[dict[str, Any]], *args: str) -> CliResult:
    (tmp_path / "fleet.yaml").write_text("hosts: []\n")
    monkeypatch.setattr(health, "load_fleet_used", lambda *a: (None, app.Used("p", "--playbook")))
    monkeypatch.setattr(health, "fleet_rows", lambda plan: [dict(r) for r in rows])
    return cli("status", "--hosts", str(tmp_path / "fleet.yaml"), *args, cwd=tmp_path)


@pytest.mark.parametrize(("rows", "args", "code"), [
    (ROWS, (), 1),
    (ROWS, ("--json",), 1),
    (ROWS, ("--min-capacity", "0"), 0),
    (ROWS, ("--min-capacity", "0.3"), 0),
    (ROWS, ("--min-capacity", "0.8"), 1),
    (ROWS[:1], (), 0),
])
def test_the_status_command_exit_code(cli: CliRunner, tmp_path: Path,
                                      monkeypatch: pytest.MonkeyPatch,
                                      rows: list[dict[str, Any]], args: tuple[str, ...],
                                      code: int) -> None:
    done = status_cli(cli, tmp_path, monkeypatch, rows, *args)
    assert done.returncode == code, done.stderr


# 3. a lock left by a stopped controller

def holder(run_id: str = "20261207-101010-abcdef", version: str = "v2",
           controller: str = "ci-1", pid: int = 4242) -> Holder:
    return Holder(run_id, "alice", controller, pid, 0.0, version, 0.0)


def test_a_rollouts_lock_names_resume_with_its_run_id() -> None:
    message = str(_refusal(FoundLock("h1", holder(), 5.0, ""), LockPolicy()))
    assert "h1 is locked by run 20261207-101010-abcdef" in message
    assert "Wait for it, or pass --lock-wait SECONDS." in message  # what it said before
    assert ("If that controller was stopped or died, `rollout rollout --resume "
            "20261207-101010-abcdef`") in message
    assert "no longer runs on this machine" not in message  # another controller: unknown


def test_a_dead_controller_on_this_machine_is_named_as_gone() -> None:
    pid = os.fork()
    if pid == 0:
        os._exit(0)
    os.waitpid(pid, 0)  # a pid that ran here and is gone
    gone = holder(controller=socket.gethostname(), pid=pid)
    message = str(_refusal(FoundLock("h1", gone, 5.0, ""), LockPolicy()))
    assert f"Its controller (pid {pid}) no longer runs on this machine." in message
    alive = holder(controller=socket.gethostname(), pid=os.getpid())
    assert "no longer runs" not in str(_refusal(FoundLock("h1", alive, 5.0, ""), LockPolicy()))


def test_resume_is_offered_only_for_a_rollout_and_quoted() -> None:
    for version in ("heal", "single:stop", "rollback:previous"):
        found = FoundLock("h1", holder(version=version), 5.0, "")
        assert "--resume" not in str(_refusal(found, LockPolicy()))
    hostile = FoundLock("h1", holder(run_id="x;touch /tmp/p"), 5.0, "")
    assert "--resume 'x;touch /tmp/p'`" in str(_refusal(hostile, LockPolicy()))


# 4. a wait that gave up at the deadline

@pytest.mark.parametrize("at", ["skip", "stop"])
@pytest.mark.parametrize("cordon", [None, "curio cordon"])
def test_a_wait_that_gives_up_without_a_cordon_says_a_cordon_would_help(
    at: str, cordon: str | None
) -> None:
    ctx, _, events = scripted_context([status([RUNNING])] * 100, **{
        "work.deadline": 5, "work.at_deadline": at, "work.cordon": cordon,
        "work.uncordon": cordon and "curio uncordon"})
    clock = Clock()
    if at == "skip":
        with pytest.raises(StepFailed) as failed:
            before_stop(ctx, work_how(ctx.target, "http://x/status"), clock, clock.sleep)
        reason = str(failed.value)
    else:
        reason = before_stop(ctx, work_how(ctx.target, "http://x/status"), clock,
                             clock.sleep).describe()
        assert reason in events[-1]["reason"]
    assert ("no work.cordon is set" in reason) is (cordon is None), reason
    assert ("lets the work in flight drain" in reason) is (cordon is None), reason


# 5. tables without a terminal; 7. rollback's title

class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_a_table_off_a_terminal_is_plain_aligned_text(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    rows = [{"host": "lab-1", "state": "running", "cause": "x" * 30},
            {"host": "lab-22", "state": "dead\x1b[2J"}]
    print_table(rows, ["host", "state", "cause"], "fleet status")
    out = capsys.readouterr().out
    assert out == ("fleet status\n"
                   "host    state        cause\n"
                   "lab-1   running      xxxxxxxxxxxxxxxxxxxxxxxxxxxxxx\n"
                   "lab-22  dead\\x1b[2J  -\n")
    terminal = Terminal()
    monkeypatch.setattr("sys.stdout", terminal)
    print_table(rows, ["host", "state", "cause"], "fleet status")
    assert BOX & set(terminal.getvalue())  # a terminal keeps its drawn table


def summary() -> RunSummary:
    return RunSummary("run-9", {"h1": HostOutcome("h1", "validated", "ok", "abc"),
                                "h2": HostOutcome("h2", "failed", "start failed", None)})


def test_the_result_table_off_a_terminal_and_rollbacks_own_title() -> None:
    plain = io.StringIO()
    print_summary(summary(), Console(file=plain), command="rollback")
    lines = plain.getvalue().splitlines()
    assert lines[0] == "rollback run-9" and not BOX & set(plain.getvalue())
    assert lines[1].split() == ["host", "result", "release", "reason"]
    assert lines[3] == "h2    failed     -        start failed"
    drawn = io.StringIO()
    print_summary(summary(), Console(file=drawn, force_terminal=True, width=100),
                  command="rollback")
    assert "rollback run-9" in drawn.getvalue() and BOX & set(drawn.getvalue())
    assert "rollout run-9" not in drawn.getvalue()


# 6. report latest

def journal(runs: Path, run_id: str, when: float) -> None:
    bus = EventBus(run_id)
    _run(bus)
    path = runs / f"{run_id}.jsonl"
    path.write_text("".join(e.to_json() + "\n" for e in bus.history))
    os.utime(path, (when, when))


def test_latest_is_the_journal_written_last(tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    with pytest.raises(UserError, match="no run journal"):
        latest_run(runs)
    runs.mkdir()
    journal(runs, "20261207-101010-aaaaaa", 2_000)
    journal(runs, "20261201-101010-bbbbbb", 3_000)  # an older id, resumed later
    (runs / "notes.txt").write_text("x")
    (runs / "zzz.jsonl").symlink_to(runs / "20261207-101010-aaaaaa.jsonl")  # never a link
    assert latest_run(runs) == "20261201-101010-bbbbbb"


def test_report_latest_writes_what_report_run_id_writes(cli: CliRunner, tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    runs.mkdir()
    journal(runs, "run-old", 1_000)
    journal(runs, "run-new", 2_000)
    env = {"ROLLOUT_RUNS_DIR": str(runs)}
    latest = cli("report", "latest", "--summary", str(tmp_path / "a.md"), env=env, cwd=tmp_path)
    assert latest.returncode == 0 and "the latest run: run-new" in latest.stderr, latest.stderr
    named = cli("report", "run-new", "--summary", str(tmp_path / "b.md"), env=env, cwd=tmp_path)
    assert named.returncode == 0, named.stderr
    assert (tmp_path / "a.md").read_text() == (tmp_path / "b.md").read_text()


# 9. config before stop: a warning and the safe order

def config_first(tmp_path: Path) -> tuple[Path, int]:
    """The lab playbook with its config step moved before its stop; the config's line."""
    lines = (REPO / "playbooks" / "lab.yaml").read_text().splitlines()
    config = next(i for i, x in enumerate(lines) if x.strip().startswith("- {name: config,"))
    stop = next(i for i, x in enumerate(lines) if x.strip().startswith("- {name: stop,"))
    lines.insert(stop, lines.pop(config))
    text = "\n".join(lines) + "\n"
    text = text.replace("../dockerfiles", str(REPO / "dockerfiles"))
    text = text.replace("source: files/c1.json", f"source: {REPO}/playbooks/files/c1.json")
    text = text.replace("params_source: files/", f"params_source: {REPO}/playbooks/files/")
    path = tmp_path / "play.yaml"
    path.write_text(text)
    return path, stop + 1


SETS = ("params_files=[]", "pce_bytes=0")
OFF = {"work.cordon": None, "work.uncordon": None}


def test_config_before_stop_loads_with_a_warning_and_runs_after_the_stop(tmp_path: Path) -> None:
    path, line = config_first(tmp_path)
    playbook = load_playbook(path, overrides=parse_set_options(SETS), settings=OFF)
    names = [s.name for s in playbook.steps]
    assert names[names.index("stop"):names.index("switch")] == ["stop", "config", "drain"]
    [warning] = [w for w in playbook.warnings if "config" in w]
    assert warning.startswith(f"{path}:{line}: steps[")
    assert "move step 'config' after step 'stop'" in warning
    host = Host("h1", "127.0.0.1", 22, "root", None, Path("/k"), "strict", 10, (), {})
    per_host = playbook.for_host(host)
    assert [s.name for s in per_host.steps] == names  # every rendering runs the same order


def test_other_order_problems_stay_errors(tmp_path: Path) -> None:
    path, _ = config_first(tmp_path)
    text = path.read_text()
    start = next(x for x in text.splitlines() if x.strip().startswith("- {name: start,"))
    switch = next(x for x in text.splitlines() if x.strip().startswith("- {name: switch,"))
    path.write_text(text.replace(switch, "@@").replace(start, switch).replace("@@", start))
    with pytest.raises(ConfigError, match="a switch step .* cannot come after step 'start'"):
        load_playbook(path, overrides=parse_set_options(SETS), settings=OFF)
    kinds = [("s0", "config"), ("s1", "upload"), ("s2", "stop")]
    assert corrected_order(kinds, RULES) == ([1, 2, 0], [(0, 2)])
    assert corrected_order(kinds[:2], RULES) == ([0, 1], [])  # no stop: nothing to follow


def test_a_rollout_through_the_fake_host_writes_the_config_after_the_stop(
    tmp_path: Path,
) -> None:
    path, _ = config_first(tmp_path)
    playbook = load_playbook(path, overrides=parse_set_options(SETS), settings=OFF)
    hosts = [Host("h1", "127.0.0.1", 22, "root", None, Path("/k"), "strict", 10, (), {})]
    plan = make_plan(playbook, Inventory(Path("fleet.yaml"), hosts), None)
    events: list[Event] = []
    bus = EventBus(plan.run_id)
    bus.subscribe(events.append)
    fake = FakeHost("h1")
    summary = Engine(plan, bus, lambda h: fake, tmp_path,
                     EngineOptions(release=release(tmp_path, NEW))).run()
    assert summary.exit_code == 0, summary.outcomes
    ran = [e.step for e in events if e.kind == "step_end" and e.host == "h1"]
    assert ran.index("stop") < ran.index("config") < ran.index("switch"), ran
