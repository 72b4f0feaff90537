"""`@task` for rollout's commands: invoke's Task, with help that always works.

invoke 2.x (and 3.0) read `inv drain --help` as `drain` with HOST="--help" and ran it
(pyinvoke/invoke#982), and an auto short flag `-h` for `--host` hid `-h` for help. Every
task made with this `task` has its own `-h/--help` flag, checked before positional
arguments are filled, which prints the task's help through invoke's own help printer and
exits 0; no other flag gets `-h`. A value that does not fit its flag's type (`--hosts
abc`) is a clean exit 2 instead of a ValueError traceback. Works the same under `inv`
(tasks.py) and the installed `rollout` command, since both parse with the Task's arguments.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any, cast, overload

from invoke.collection import Collection
from invoke.exceptions import Exit
from invoke.parser.argument import Argument
from invoke.program import Program
from invoke.tasks import Task
from invoke.tasks import task as invoke_task

from rollout.cli.shortflags import names_for

HELP_NAMES = ("help", "h")
HELP_TEXT = "Show this help and exit."
FILLED_BY_FLAG = "<filled by a flag>"
TYPE_WORDS = {int: "a whole number", float: "a number"}


def _flag(arg: Argument) -> str:
    return "--" + arg.names[0]


class CheckedArgument(Argument):
    """An argument whose bad value (`--hosts abc`) exits 2 with a message; a positional
    argument never takes a word that starts with `-` (`drain --bogus`: an unknown option,
    not a host named `--bogus`)."""

    def __repr__(self) -> str:  # how invoke's parser names it: "Flag --hosts needed value"
        return _flag(self)

    def set_value(self, value: Any, cast: bool = True) -> None:
        if self.positional and cast and str(value).startswith("-"):
            raise Exit(f"error: no option {value} here, and {str(self.name).upper()} cannot "
                       "start with '-' (--help lists the options)", 2)
        try:
            super().set_value(value, cast)
        except (TypeError, ValueError):
            word = TYPE_WORDS.get(self.kind, self.kind.__name__)
            raise Exit(f"error: {_flag(self)} {value!r} is not {word}", 2) from None


class FillingFlag(CheckedArgument):
    """A boolean flag that, once given, fills the task's missing positional arguments
    (with `fills`), so the parser completes the task without them: `--help` (the task
    then prints its help) and `diagnose --all` (HOST becomes `all`)."""

    fills = FILLED_BY_FLAG
    positionals: list[Argument]

    def set_value(self, value: Any, cast: bool = True) -> None:
        super().set_value(value, cast)
        if self.value:
            for arg in getattr(self, "positionals", []):
                if arg.value is None:
                    arg.set_value(self.fills, cast=False)


class AllFlag(FillingFlag):
    fills = "all"


class RolloutTask(Task[Any]):
    """invoke's Task with `-h/--help` of its own and checked argument values."""

    all_flags: tuple[str, ...] = ()

    def get_arguments(self, ignore_unknown_help: bool | None = None) -> list[Argument]:
        saved = dict(self.help)  # invoke pops the help texts it uses; keep them for later
        try:
            parsed = super().get_arguments(ignore_unknown_help)
        finally:
            self.help = saved
        args = [self._checked(arg) for arg in parsed]
        positionals = [arg for arg in args if arg.positional]
        for arg in args:
            if isinstance(arg, FillingFlag):
                arg.positionals = positionals
        helper = FillingFlag(names=HELP_NAMES, kind=bool, default=False, help=HELP_TEXT)
        helper.positionals = positionals
        return [*args, helper]

    def _checked(self, arg: Argument) -> Argument:
        names = names_for(arg.names[0])  # the one table of short flags (cli/shortflags.py)
        is_all = {arg.attr_name, arg.names[0]} & set(self.all_flags)
        cls = AllFlag if is_all else CheckedArgument
        return cls(
            names=names, kind=arg.kind, default=arg.default, help=arg.help,
            positional=arg.positional, optional=arg.optional,
            incrementable=arg.incrementable, attr_name=arg.attr_name,
        )  # fmt: skip

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if kwargs.pop("help", False):
            print_task_help(self)
            return None
        return super().__call__(*args, **kwargs)


def print_task_help(task: Task[Any]) -> None:
    """The task's help, as `inv --help TASK` prints it, under the name it was run by."""
    binary = Path(sys.argv[0]).name or "rollout"
    called = next((a for a in sys.argv[1:] if a.rpartition(".")[2] == task.name), task.name)
    *outer, own = called.split(".")
    namespace = Collection()
    namespace.add_task(task, name=own)
    for name in reversed(outer):  # lab.up: the task inside a collection named lab
        parent = Collection()
        parent.add_collection(namespace, name=name)
        namespace = parent
    Program(namespace=namespace, binary=binary, name=binary).run(
        [binary, "--help", called], exit=False
    )


@overload
def task(body: Callable[..., Any], /) -> RolloutTask: ...
@overload
def task(
    *, all_flags: tuple[str, ...] = (), **kwargs: Any
) -> Callable[[Callable[..., Any]], RolloutTask]: ...


def task(
    body: Callable[..., Any] | None = None, /, *, all_flags: tuple[str, ...] = (), **kwargs: Any
) -> RolloutTask | Callable[[Callable[..., Any]], RolloutTask]:
    """invoke's `@task` (same keyword options) making a RolloutTask. `all_flags` names
    boolean flags that stand for the positional HOST `all` (diagnose --all)."""

    def make(fn: Callable[..., Any]) -> RolloutTask:
        options = {"auto_shortflags": False, **kwargs}  # short flags: cli/shortflags.py
        made = cast(RolloutTask, invoke_task(fn, klass=RolloutTask, **options))
        made.all_flags = all_flags
        return made

    return make if body is None else make(body)
