"""The command line through invoke's real Program and Collection: every task prints its help
for `TASK --help` and `TASK -h` (never runs), single steps take HOST as their first
argument, and bad values and lab.* errors are clean messages with their exit code."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import invoke
import pytest
from docker.errors import APIError
from invoke.program import Program

import rollout.cli
from rollout import lab
from rollout.cli import lab_tasks, namespace
from rollout.commands import app, fleet, single

REPO = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
TASKS = sorted(namespace.task_names)
SINGLE_STEPS = ("drain", "stop", "start", "validate")


def run_rollout(*argv: str) -> int:
    """`rollout ARGV` in this process, through the installed command's own Program."""
    return _run(rollout.cli.program, ["rollout", *argv])


def _run(program: Program, argv: list[str]) -> int:
    saved = sys.argv
    sys.argv = argv  # as a real run has it (help names the command it was run as)
    try:
        program.run(argv)
    except SystemExit as e:
        return int(e.code or 0)
    finally:
        sys.argv = saved
    return 0


def run_inv(*argv: str) -> int:
    """`inv ARGV` in this repository, through invoke's own Program loading tasks.py."""
    program = Program(name="Invoke", binary="inv[oke]", binary_names=["invoke", "inv"],
                      version=invoke.__version__)  # fmt: skip
    return _run(program, ["inv", "--search-root", str(REPO), *argv])


@pytest.fixture
def no_task_runs(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    """Any task body that would touch a fleet or the lab records itself instead."""
    ran: list[str] = []

    def record(name: str) -> Any:
        def fake(*args: Any, **kwargs: Any) -> Any:
            ran.append(name)
            raise AssertionError(f"{name} ran")
        return fake

    for module, attr in ((app, "run_rollout"), (fleet, "load_fleet"), (single, "run_steps"),
                         (lab, "up"), (lab, "down"), (lab, "status")):  # fmt: skip
        monkeypatch.setattr(module, attr, record(f"{module.__name__}.{attr}"))
    monkeypatch.setenv("ROLLOUT_HOSTS", str(REPO / "no-such-inventory.yaml"))
    yield ran


@pytest.mark.parametrize("flag", ["--help", "-h"])
@pytest.mark.parametrize("name", TASKS)
@pytest.mark.parametrize("runner", [run_rollout, run_inv], ids=["rollout", "inv"])
def test_every_task_prints_its_help_and_does_not_run(
    runner: Any, name: str, flag: str, no_task_runs: list[str],
    capsys: pytest.CaptureFixture[str],
) -> None:  # fmt: skip
    code = runner(name, flag)
    out, err = capsys.readouterr()
    assert code == 0, err
    assert not no_task_runs and "error" not in err, err
    assert f"] {name} [" in out and "Docstring:" in out, out
    first_line = (namespace[name].__doc__ or "").strip().splitlines()[0]
    assert first_line in out
    assert "-h, --help" in out, "-h must stay help, not a task's short flag"


def test_help_after_the_host_prints_help_too(no_task_runs: list[str],
                                             capsys: pytest.CaptureFixture[str]) -> None:
    assert run_rollout("drain", "lab-1", "--help") == 0
    assert "Docstring:" in capsys.readouterr().out and not no_task_runs


ENTRY_POINTS = {
    "rollout": [str(BIN / "rollout")],
    "inv": [str(BIN / "inv")],
    "python -m rollout": [sys.executable, "-m", "rollout"],
}
"""Each way the tasks are started, as a process (the other tests run them in this one)."""


@pytest.mark.parametrize("command", ENTRY_POINTS.values(), ids=ENTRY_POINTS.keys())
def test_installed_commands_print_help_without_running(command: list[str]) -> None:
    env = {**os.environ, "ROLLOUT_HOSTS": "/nonexistent/fleet.yaml"}
    p = subprocess.run([*command, "drain", "--help"], cwd=REPO, env=env,
                       capture_output=True, text=True, timeout=60)  # fmt: skip
    assert p.returncode == 0 and "Usage:" in p.stdout and "drain HOST" in p.stdout, p.stderr
    assert p.stderr == ""


@pytest.fixture
def steps_run(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> list[tuple[str, ...]]:
    calls: list[tuple[str, ...]] = []
    monkeypatch.setattr(single, "run_steps",
                        lambda hosts, playbook, host, kinds, *lock: calls.append((host, *kinds))
                        or [])
    monkeypatch.setattr(fleet, "load_fleet",
                        lambda hosts, playbook, limit: calls.append(("load_fleet", limit)))
    monkeypatch.setattr("rollout.commands.diagnose.diagnose", lambda plan, as_json: 0)
    inventory = tmp_path / "fleet.yaml"
    inventory.write_text("hosts: []\n")
    monkeypatch.setenv("ROLLOUT_HOSTS", str(inventory))
    return calls


@pytest.mark.parametrize("name", SINGLE_STEPS)
@pytest.mark.parametrize("runner", [run_rollout, run_inv], ids=["rollout", "inv"])
def test_single_steps_take_the_host_as_first_argument(
    runner: Any, name: str, steps_run: list[tuple[str, ...]]
) -> None:
    assert runner(name, "lab-2") == 0
    assert runner(name, "--host", "lab-3") == 0
    assert [call[0] for call in steps_run] == ["lab-2", "lab-3"]


def test_diagnose_takes_a_host_group_or_all(steps_run: list[tuple[str, ...]],
                                            capsys: pytest.CaptureFixture[str]) -> None:
    assert run_rollout("diagnose", "lab-1") == 0
    assert run_rollout("diagnose", "all") == 0
    assert run_rollout("diagnose", "--all") == 0
    assert [limit for _, limit in steps_run] == ["lab-1", "all", "all"]
    assert run_rollout("diagnose", "lab-1", "--all") == 2
    assert "not both" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (("lab.up", "--hosts", "abc"), "--hosts 'abc' is not a whole number"),
        (("lab.up", "--hosts", "99"), "--hosts must be between 1 and 64, got 99"),
        (("lab.up", "--hosts", "0"), "--hosts must be between 1 and 64, got 0"),
        (("lab.up", "--memory", "lots"), "--memory 'lots' is not a size like 512m or 2g"),
        (("status", "--interval", "soon"), "--interval 'soon' is not a number"),
        (("rollout", "--lock-wait", "x"), "--lock-wait 'x' is not a number"),
    ],
)
def test_bad_values_exit_2_with_a_message(
    argv: tuple[str, ...], message: str, capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:  # fmt: skip
    monkeypatch.setattr(lab.fleet, "ensure_engine", lambda: pytest.fail("engine touched"))
    assert run_rollout(*argv) == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err, err


def test_lab_tasks_without_an_engine_exit_3(monkeypatch: pytest.MonkeyPatch,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("DOCKER_HOST", "unix:///nonexistent/docker.sock")
    for name in ("lab.status", "lab.down"):
        assert run_rollout(name) == 3
        err = capsys.readouterr().err
        assert "the Docker engine at DOCKER_HOST=unix:///nonexistent/docker.sock does not answer" \
            in err, err
        assert "Traceback" not in err


def test_a_docker_refusal_is_exit_3_in_one_line(monkeypatch: pytest.MonkeyPatch,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    def refuse() -> None:
        raise APIError("409 Conflict", explanation='container name "/x" is already in use')

    monkeypatch.setattr(lab, "status", refuse)
    assert run_rollout("lab.status") == 3
    err = capsys.readouterr().err
    assert 'the Docker engine refused: container name "/x" is already in use' in err
    assert "Traceback" not in err
    assert lab_tasks.ns.task_names  # the lab collection is the one wired in


def test_every_task_is_made_by_rollouts_task() -> None:
    from rollout.cli.taskdef import RolloutTask

    assert all(isinstance(namespace[name], RolloutTask) for name in TASKS)
