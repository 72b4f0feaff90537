"""The command line keeps its word (issue 19): usage errors exit 2, a missing Docker engine
exits 3, `rollout --help` shows rollout's own options only, each short flag means one
option in every task, and a dry run with a host it could not plan exits 1."""

from __future__ import annotations

import os
import subprocess
import sys
from collections import defaultdict
from pathlib import Path
from typing import Any

import invoke
import pytest
from conftest import CliRunner
from fakehost import FakeHost
from invoke.program import Program

import rollout.cli
from rollout.cli import namespace
from rollout.cli.shortflags import SHORT_FLAGS
from rollout.commands import app, dryrun, rollback
from rollout.config.inventory import Host, Inventory
from rollout.config.playbook import LAB_PLAYBOOK, parse_set_options
from rollout.engine.plan import make_plan
from rollout.errors import StepFailed, TransportError
from rollout.steps.decision import Release
from rollout.steps.identity import identity_problem
from rollout.steps.kinds import load_playbook

REPO = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
NO_DOCKER = "unix:///nonexistent/h-cli-docker.sock"
INVENTORY = """\
defaults:
  user: root
hosts:
  - name: a
    address: 127.0.0.1
    port: 1
"""


def run_in_process(program: Program, argv: list[str]) -> int:
    saved = sys.argv
    sys.argv = argv
    try:
        program.run(argv)
    except SystemExit as e:
        return int(e.code or 0)
    finally:
        sys.argv = saved
    return 0


def run_rollout(*argv: str) -> int:
    return run_in_process(rollout.cli.program, ["rollout", *argv])


def run_inv(*argv: str) -> int:
    program = Program(name="Invoke", binary="inv[oke]", binary_names=["invoke", "inv"],
                      version=invoke.__version__)  # fmt: skip
    return run_in_process(program, ["inv", "--search-root", str(REPO), *argv])


def installed(binary: str, *argv: str, env: dict[str, str] | None = None,
              cwd: Path = REPO) -> subprocess.CompletedProcess[str]:  # fmt: skip
    return subprocess.run([str(BIN / binary), *argv], cwd=cwd, capture_output=True, text=True,
                          timeout=120, env={**os.environ, **(env or {})})  # fmt: skip


# ---------------------------------------------------------------- usage errors: exit 2

USAGE_ERRORS = {
    "unknown option": ("rollout", "--hosts", "x.yaml", "--no-such-option"),
    "unknown option after the host": ("drain", "lab-1", "--no-such-option"),
    "unknown option for the host": ("drain", "--no-such-option"),
    "missing argument": ("drain",),
    "missing value": ("rollout", "--hosts"),
    "unknown command": ("no-such-command",),
    "unknown core option": ("--echo", "status"),
    "bad value": ("status", "--interval", "soon"),
}


@pytest.mark.parametrize("argv", USAGE_ERRORS.values(), ids=USAGE_ERRORS.keys())
def test_usage_errors_exit_2(argv: tuple[str, ...], capsys: pytest.CaptureFixture[str]) -> None:
    assert run_rollout(*argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and "Traceback" not in err


def test_a_flag_without_its_value_is_named(capsys: pytest.CaptureFixture[str]) -> None:
    assert run_rollout("rollout", "--hosts") == 2
    assert "Flag --hosts needed value" in capsys.readouterr().err


def test_the_installed_command_exits_2_on_usage_errors() -> None:
    """As a process too (the other usage errors run in this one, test_usage_errors_exit_2)."""
    p = installed("rollout", *USAGE_ERRORS["unknown option"])
    assert p.returncode == 2, p.stderr
    assert "--help" in p.stderr  # says where the options are listed


def test_a_reader_that_leaves_early_gets_no_traceback() -> None:
    """`rollout --help | head -1`: the pipe closes under the writer; no BrokenPipe trace."""
    with subprocess.Popen([str(BIN / "rollout"), "--help"], cwd=REPO, stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, bufsize=0) as p:  # fmt: skip
        assert p.stdout is not None and p.stderr is not None
        p.stdout.read(1)
        p.stdout.close()  # the reader left after one byte
        err = p.stderr.read().decode()
        assert p.wait(timeout=60) in (0, 141), err
    assert "Traceback" not in err and "BrokenPipe" not in err


def test_a_task_whose_reader_leaves_early_is_no_bug(tmp_path: Path) -> None:
    """`rollout inventory --list | head -1`: the task's own output meets the closed pipe;
    it ends as a pipe's writer does (141), never as a bug (70) with a trace."""
    fleet = tmp_path / "fleet.yaml"
    fleet.write_text("hosts:\n" + "".join(
        f"  - {{name: h{i}, address: 127.0.0.1, port: 22}}\n" for i in range(400)))
    with subprocess.Popen([str(BIN / "rollout"), "inventory", "--hosts", str(fleet), "--list"],
                          cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                          bufsize=0) as p:  # fmt: skip
        assert p.stdout is not None and p.stderr is not None
        p.stdout.read(1)
        p.stdout.close()
        err = p.stderr.read().decode()
        assert p.wait(timeout=60) in (0, 141), err
    assert "internal error" not in err and "Traceback" not in err, err


@pytest.mark.parametrize("argv", [USAGE_ERRORS["unknown option for the host"],
                                  USAGE_ERRORS["bad value"]])  # fmt: skip
def test_inv_exits_2_where_rollouts_own_arguments_parse(argv: tuple[str, ...]) -> None:
    """Under `inv` invoke's own Program parses; what rollout's arguments check is exit 2."""
    assert run_inv(*argv) == 2


def test_a_host_never_starts_with_a_dash(monkeypatch: pytest.MonkeyPatch) -> None:
    ran: list[str] = []
    monkeypatch.setattr(rollout.cli.rollout_tasks, "_single",
                        lambda kinds, host, hosts, playbook, *lock: ran.append(host))  # fmt: skip
    assert run_rollout("validate", "-o", "x") == 2
    assert run_rollout("validate", "--", "x") == 2
    assert ran == []
    assert run_rollout("validate", "lab-1") == 0 and ran == ["lab-1"]


# ---------------------------------------------------------------- this machine: exit 3


def _inventory(tmp_path: Path) -> Path:
    path = tmp_path / "fleet.yaml"
    path.write_text(INVENTORY)
    return path


@pytest.fixture
def no_docker(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("DOCKER_HOST", NO_DOCKER)
    monkeypatch.setenv("ROLLOUT_RUNS_DIR", str(tmp_path / "runs"))
    monkeypatch.chdir(tmp_path)


@pytest.mark.parametrize("runner", [run_rollout, run_inv], ids=["rollout", "inv"])
def test_a_build_without_a_docker_engine_exits_3(
    runner: Any, tmp_path: Path, no_docker: None, capsys: pytest.CaptureFixture[str]
) -> None:
    code = runner("build", "--out", str(tmp_path / "out"), "--playbook", str(LAB_PLAYBOOK))
    out, err = capsys.readouterr()
    assert code == 3, out + err
    assert "the Docker engine at DOCKER_HOST=unix:///nonexistent/" in err
    assert not (tmp_path / "out").exists()


def test_a_rollout_without_a_docker_engine_exits_3_before_any_host(
    cli: CliRunner, tmp_path: Path, no_docker: None
) -> None:
    p = cli("rollout", "--hosts", str(_inventory(tmp_path)), "--playbook", str(LAB_PLAYBOOK))
    assert p.returncode == 3, p.stdout + p.stderr
    assert "does not answer" in p.stderr and "unset DOCKER_HOST" in p.stderr
    assert "127.0.0.1" not in p.stdout + p.stderr  # no host was tried


# ---------------------------------------------------------------- --help and short flags


def test_help_shows_rollouts_own_options_only(capsys: pytest.CaptureFixture[str]) -> None:
    assert run_rollout("--help") == 0
    out = capsys.readouterr().out
    for own in ("--help", "--list", "--version"):
        assert own in out
    for internal in ("--complete", "--echo", "--prompt-for-sudo-password", "--pty",
                     "--hide", "--warn-only", "--write-pyc", "--command-timeout"):  # fmt: skip
        assert internal not in out
    for name in ("rollout", "rollback", "drain", "lab.up"):
        assert f"  {name} " in out


def test_version_and_list_still_work(capsys: pytest.CaptureFixture[str]) -> None:
    assert run_rollout("--version") == 0
    assert rollout.__version__ in capsys.readouterr().out
    assert run_rollout("--list") == 0
    assert "rollback" in capsys.readouterr().out


def _short_flags() -> dict[str, set[str]]:
    """Every short flag, given before a task or in one, -> the long options it names."""
    meaning: dict[str, set[str]] = defaultdict(set)
    contexts = [rollout.cli.program.core_args()]
    contexts += [namespace[name].get_arguments() for name in namespace.task_names]
    for args in contexts:
        for arg in args:
            for short in (n for n in arg.names if len(n) == 1):
                meaning[short].add(arg.names[0])
    return meaning


def test_each_short_flag_means_one_option_everywhere() -> None:
    meaning = _short_flags()
    assert {s: names for s, names in meaning.items() if len(names) > 1} == {}
    assert meaning["e"] == {"set"} and meaning["j"] == {"json"} and meaning["o"] == {"output"}
    assert meaning["h"] == {"help"} and meaning["V"] == {"version"}
    # the table declares them all: no task picks one of its own
    assert {s: n for s, n in meaning.items() if s not in "hV"} == {
        short: {long} for long, short in SHORT_FLAGS.items() if short in meaning
    }


def test_dash_e_is_set_in_rollout_and_build(monkeypatch: pytest.MonkeyPatch,
                                            tmp_path: Path) -> None:  # fmt: skip
    seen: list[Any] = []
    monkeypatch.setattr(app, "run_rollout",
                        lambda req: seen.append(req.sets) or dryrun.DryRun("r", {}))  # fmt: skip
    monkeypatch.setattr(app, "run_build",
                        lambda playbook, sets, out, verbose: seen.append(sets)
                        or _Manifest())  # fmt: skip
    monkeypatch.setenv("ROLLOUT_HOSTS", str(_inventory(tmp_path)))
    assert run_rollout("rollout", "-e", "version=v9") == 0
    assert run_rollout("build", "--out", "x", "-e", "version=v9") == 0
    assert [tuple(s)[:1] for s in seen] == [("version=v9",), ("version=v9",)]


class _Manifest:
    release = "r"
    version = "v"


# ---------------------------------------------------------------- dry run: exit 1 when a host
# could not be planned


def _plan(names: list[str], tmp_path: Path) -> Any:
    sets = parse_set_options(("params_files=[]", "pce_bytes=0"))
    playbook = load_playbook(LAB_PLAYBOOK, overrides=sets)
    hosts = [Host(n, "127.0.0.1", 22, "root", None, Path("/k"), "strict", 10, (), {})
             for n in names]
    return make_plan(playbook, Inventory(tmp_path / "fleet.yaml", hosts), None)


def _connect(hosts: dict[str, FakeHost]) -> Any:
    def connect(host: Host) -> FakeHost:
        if host.name not in hosts:
            raise TransportError(f"{host.name}: connection refused")
        return hosts[host.name]

    return connect


def test_dry_run_exits_1_when_a_host_could_not_be_planned(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    given = Release("bbbbbbbbbbbb", "img", "v2", ())
    fakes = {"h1": FakeHost("h1"), "h2": FakeHost("h2")}
    planned = dryrun.dry_run(_plan(["h1", "h2"], tmp_path), _connect(fakes), tmp_path, given)
    assert (planned.exit_code, planned.unplanned) == (0, {})
    partly = dryrun.dry_run(_plan(["h1", "h3"], tmp_path), _connect(fakes), tmp_path, given)
    assert partly.exit_code == 1 and list(partly.unplanned) == ["h3"]
    out = capsys.readouterr().out
    assert "h3: UNREACHABLE" in out and "not planned: 1 of 2 host(s): h3" in out


# ---------------------------------------------------------------- rollback --to: a host already
# there is left as it is


class _Ctx:
    name = "h1"

    def __init__(self) -> None:
        self.notes: list[str] = []

    def emit(self, kind: str, **fields: Any) -> None:
        self.notes.append(f"{kind}: {fields['reason']}")


def _on(monkeypatch: pytest.MonkeyPatch, current: str, previous: str | None) -> None:
    monkeypatch.setattr(rollback, "current_release", lambda ctx: current)
    monkeypatch.setattr(rollback, "recorded_previous", lambda ctx: previous)
    monkeypatch.setattr(rollback, "read_release", lambda ctx, rid: Release(rid, "", "", ()))


def test_rollback_to_the_release_a_host_runs_leaves_it_there(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    _on(monkeypatch, "aaaaaaaaaaaa", None)
    ctx = _Ctx()
    assert rollback.target_for("aaaaaaaaaaaa")(ctx).id == "aaaaaaaaaaaa"
    assert ctx.notes == ["note: already on release aaaaaaaaaaaa: left as it is"]


def test_rollback_without_an_earlier_release_still_says_so(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    _on(monkeypatch, "aaaaaaaaaaaa", "aaaaaaaaaaaa")
    with pytest.raises(StepFailed, match="no earlier release"):
        rollback.target_for(None)(_Ctx())
    _on(monkeypatch, "aaaaaaaaaaaa", "bbbbbbbbbbbb")
    assert rollback.target_for(None)(_Ctx()).id == "bbbbbbbbbbbb"


# ---------------------------------------------------------------- validate on a stopped host


def test_validate_on_a_stopped_host_says_nothing_answered() -> None:
    why = identity_problem(9821, [], None, None, None)
    assert why == "nothing answered on port 9821: the daemon is not running"
    held = identity_problem(9821, [{"pid": 77}], None, None, None)
    assert held == "the daemon is not running, yet port 9821 held by pid 77: not a daemon of ours"
