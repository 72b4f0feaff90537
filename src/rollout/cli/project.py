"""The project file on the command line: which inventory and playbook a command uses, and
the options' defaults it gives (rollout.config.project reads it).

An option's default from the project file is set on the parsed argument only when the
command line did not give that option, and only after its type is checked: a value is
data, never parsed as a flag."""

from __future__ import annotations

import difflib
import os
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from invoke.parser.argument import Argument
from invoke.parser.context import ParserContext

from rollout.config.project import (
    HOSTS_ENV,
    PLAYBOOK_ENV,
    Chosen,
    Project,
    choose,
    find_project,
    load_project,
)
from rollout.errors import ConfigError

explicit: str | None = None
"""The `--project FILE` the command was given (the program sets it), over $ROLLOUT_PROJECT."""

LAB_INVENTORY = "lab/fleet.yaml"
NOT_DEFAULTS = ("help", "hosts", "playbook", "resume")
"""Options a project file gives no default for: the inventory and the playbook are its own
top-level keys; a resume names one run."""


def current() -> Project | None:
    """The project file in force (read afresh: it is small), or None."""
    path = find_project(Path.cwd(), explicit)
    return None if path is None else load_project(path)


def inventory_for(hosts: str | None) -> Chosen:
    """--hosts, else $ROLLOUT_HOSTS, else the project's inventory, else the lab's."""
    chosen = choose(hosts, HOSTS_ENV, current(), "inventory", "--hosts")
    return chosen or Chosen(LAB_INVENTORY, "default")


def playbook_for(playbook: str | None) -> Chosen | None:
    """--playbook, else $ROLLOUT_PLAYBOOK, else the project's playbook; None: the
    inventory's own, else today's default (commands.fleet.choose_playbook)."""
    return choose(playbook, PLAYBOOK_ENV, current(), "playbook", "--playbook")


def option_name(arg: Argument) -> str:
    return str(arg.names[0])


def settable(context: ParserContext) -> dict[str, Argument]:
    """The options of a command a project file may give defaults for, by their names."""
    args = {id(arg): arg for arg in context.args.values()}.values()
    return {option_name(a): a for a in args
            if not a.positional and str(a.name).rstrip("_") not in NOT_DEFAULTS}


def check_defaults(project: Project, contexts: Mapping[str, ParserContext]) -> None:
    """Every command and option the project's `defaults` names exists and takes a default;
    ConfigError at its line, with a did-you-mean, otherwise."""
    for command, options in project.defaults.items():
        if command not in contexts:
            raise _unknown(project, ("defaults", command), command, contexts, "command")
        known = settable(contexts[command])
        for key, value in options.items():
            name = key.replace("_", "-").rstrip("-")
            if name not in known:
                raise _unknown(project, ("defaults", command, key), name, known, "option")
            _check_type(project, ("defaults", command, key), known[name], value)


def _unknown(project: Project, key: tuple[str, ...], name: str, known: Iterable[str],
             what: str) -> ConfigError:
    names = sorted(known)
    close = difflib.get_close_matches(name, names, n=1)
    hint = f" (did you mean '{close[0]}'?)" if close else ""
    return ConfigError(f"unknown {what}{hint}; expected one of: {', '.join(names)}",
                       project.location(*key))


TYPE_WORDS = {bool: "true or false", int: "a whole number", float: "a number",
              str: "a string", list: "a list of strings"}


def _fits(kind: Any, value: Any) -> bool:
    if kind is list:
        return isinstance(value, list) and all(isinstance(v, str) for v in value)
    if kind is float:
        return isinstance(value, int | float) and not isinstance(value, bool)
    if kind is int:
        return isinstance(value, int) and not isinstance(value, bool)
    return isinstance(value, kind)


def _check_type(project: Project, key: tuple[str, ...], arg: Argument, value: Any) -> None:
    if not _fits(arg.kind, value):
        word = TYPE_WORDS.get(arg.kind, arg.kind.__name__)
        raise ConfigError(f"must be {word}, got a {type(value).__name__}",
                          project.location(*key))


def apply_defaults(project: Project, contexts: Mapping[str, ParserContext],
                   parsed: Iterable[ParserContext]) -> None:
    """Check the project's defaults, then set each on the parsed command's option that the
    command line left unset."""
    check_defaults(project, contexts)
    for context in parsed:
        known = settable(context)
        for key, value in project.defaults.get(str(context.name), {}).items():
            arg = known[key.replace("_", "-").rstrip("-")]
            if arg.got_value:
                continue
            if arg.kind is list:  # set_value would append the list as one item
                arg._value = list(value)
            else:
                arg.set_value(value, cast=False)


def use_project(path: str | None) -> None:
    """`--project FILE`: that file, for every lookup of this command."""
    global explicit
    explicit = path or os.environ.get("ROLLOUT_PROJECT") or None
