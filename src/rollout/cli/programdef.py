"""The `rollout` command: invoke's Program with rollout's own options and exit codes.

invoke's Program offers its task runner's options (--echo, --pty, --prompt-for-sudo-password,
--complete, ...) before any task and exits 1 on a usage error. rollout's tasks never run a
shell through invoke, so the command takes only `-h/--help`, `--list` and `-V/--version`
before a task, and every usage error (an unknown option, a missing argument, an option
without its value) exits 2, as bad input does everywhere in rollout.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from invoke.exceptions import Exit, ParseError
from invoke.parser.argument import Argument
from invoke.program import Program

from rollout.cli.version import version_line
from rollout.errors import RolloutError
from rollout.output.escape import report_text

CORE_OPTIONS = {"help": ("help", "h"), "list": ("list",), "version": ("version", "V")}
PROJECT_HELP = ("The project file (default: $ROLLOUT_PROJECT, else rollout.yaml here or in the "
                "nearest parent folder): the inventory, the playbook, options' defaults.")
"""The command's own options, given before a task: name -> its names on the command line."""

USAGE_EXIT = 2


@contextmanager
def usage_errors(binary: str) -> Iterator[None]:
    """invoke's ParseError (exit 1) as rollout's usage error: exit 2, with where to look."""
    try:
        yield
    except ParseError as e:
        raise Exit(f"error: {e} (`{binary} --help` lists the commands, "
                   f"`{binary} COMMAND --help` its options)", USAGE_EXIT) from e


class RolloutProgram(Program):
    """Only rollout's own options before a task; usage errors exit 2."""

    def core_args(self) -> list[Argument]:
        own = {str(arg.name): arg for arg in super().core_args() if arg.name in CORE_OPTIONS}
        for name, arg in own.items():
            arg.names = CORE_OPTIONS[name]  # no -l: that is --limit in the tasks
        project = Argument(names=("project",), kind=str, help=PROJECT_HELP)
        return [*own.values(), project]

    def task_args(self) -> list[Argument]:
        return []  # the task runner's --collection and --search-root: rollout's are bundled

    def parse_core_args(self) -> None:
        with usage_errors(self.binary):
            super().parse_core_args()
        # invoke's later stages read its other options: there, at their defaults, never parsed
        for arg in Program.core_args(self):
            self.args.setdefault(arg.name, arg)

    def parse_tasks(self) -> None:
        with usage_errors(self.binary):
            super().parse_tasks()
        self.apply_project()

    def apply_project(self) -> None:
        """The project file's defaults on the parsed command's unset options (exit 2 for a
        bad project file, naming its file, line and key)."""
        asked_help = self.args["help"].value or self.args["list"].value
        if asked_help or not self.tasks or any(
                t.args["help"].value for t in self.tasks if "help" in t.args):
            return  # help and --version work whatever the project file holds
        from rollout.cli import project  # for start-up time: --version reads no project

        project.use_project(self.args["project"].value)
        try:
            found = project.current()
            if found is not None:
                project.apply_defaults(found, self.parser.contexts, self.tasks)
        except RolloutError as e:
            raise Exit(report_text(f"error: {e}"), e.exit_code) from e

    def parse_cleanup(self) -> None:
        with usage_errors(self.binary):
            super().parse_cleanup()

    def print_version(self) -> None:
        print(version_line())

    def print_help(self) -> None:
        print(f"Usage: {self.binary} [--help | --list | --version] COMMAND [OPTIONS] ...")
        print("")
        print("Options:")
        print("")
        self.print_columns(self.initial_context.help_tuples())
        self.list_tasks()
