"""Shared fixtures of the unit tier (no Docker; run in parallel by `pytest -n 3`).

`cli` runs the `rollout` command in this process: the installed command's own main with
its argv, its exit code and what it printed. Starting the installed command is the point of
only a few tests (one or two per entry point, in test_cli_usage.py and test_cli_tasks.py);
every other command-line test pays no interpreter start and no package import.

Bytecode is kept as on a developer's machine: where PYTHONDONTWRITEBYTECODE is set (this
machine sets it), each worker would otherwise parse, assertion-rewrite and compile every
test module and every rollout module again on every run, about 6 s of CPU per worker
(rollout.bench.side_by_side.as_installed does the same for the bench's rollout children).
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

sys.dont_write_bytecode = False  # before rollout's import: its bytecode is kept too

import rollout.cli  # noqa: E402


@dataclass(frozen=True)
class CliResult:
    """What `rollout ARGV` did, in the shape of subprocess.CompletedProcess."""

    returncode: int
    stdout: str
    stderr: str


CliRunner = Callable[..., CliResult]


def exit_code(stop: SystemExit) -> int:
    """The status a process would exit with after this SystemExit (a message exits 1)."""
    if stop.code is None or isinstance(stop.code, int):
        return stop.code or 0
    print(stop.code, file=sys.stderr)  # as the interpreter does with sys.exit("message")
    return 1


@pytest.fixture
def cli(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> CliRunner:
    """`rollout ARGV` run in this process (from `cwd`, with `env` set), as the installed
    command runs it: rollout.cli.run() reading sys.argv (main() less its settings of the
    collector, which are the process's and would outlive the command here)."""

    def run(*argv: str, cwd: Path | None = None, env: dict[str, str] | None = None) -> CliResult:
        capsys.readouterr()  # what the test printed before is not the command's
        with monkeypatch.context() as scoped:
            scoped.setattr(sys, "argv", ["rollout", *argv])
            if cwd is not None:
                scoped.chdir(cwd)
            for name, value in (env or {}).items():
                scoped.setenv(name, value)
            try:
                rollout.cli.run()
                code = 0
            except SystemExit as stop:
                code = exit_code(stop)
        out, err = capsys.readouterr()
        return CliResult(code, out, err)

    return run
