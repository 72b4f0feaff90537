"""Inventory values are data: what an inventory var (or a --set value) may not do.

* set anything that is executed: the supervise step's `launcher`, the program word of a
  command (its first word, an argv list's first item), directly or through a playbook var
  that uses it. Those come from the playbook alone (and --set, the operator's own line).
* take a name reserved for the template context (`host`, `release_dir`, ...).
* hold a NUL or another control character (tab and newline excepted), at any depth.

The checks are pure: they name the offending var; the caller finds its file and line.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from typing import Any

from rollout.errors import ConfigError, Location

from .nested import simple_commands
from .render import is_template
from .shellwords import ShellSyntaxError, Word, split_words
from .template_check import paths_used, strings_in
from .yamlfile import KeyPath, YamlDoc, to_plain

_CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f\ud800-\udfff]")
"""Control characters a value may not hold (tab and newline are allowed), and lone UTF-16
surrogates (no text holds one: it cannot be written as UTF-8 to a host)."""
_ASSIGNMENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*=")


class HostVarRefused(ConfigError):
    """An inventory var refused at load; `var` names it so that its file:line can be found."""

    def __init__(self, message: str, host: str, var: str, where: Location | None = None):
        super().__init__(message, where)
        self.host = host
        self.var = var


def control_character(value: Any) -> str | None:
    """The first control character (as an escape) in a value at any depth, or None."""
    for text in _texts(value):
        found = _CONTROL.search(text)
        if found is not None:
            return repr(found.group())[1:-1]
    return None


def _texts(value: Any) -> Iterator[str]:
    if isinstance(value, str):
        yield value
    elif isinstance(value, Mapping):
        for key, item in value.items():
            yield str(key)
            yield from _texts(item)
    elif isinstance(value, list | tuple):
        for item in value:
            yield from _texts(item)


def _program_words(command: Any) -> Iterator[str]:
    """The templated words in program position: each simple command's first word (after
    `NAME=value` assignments), an argv list's first item."""
    if isinstance(command, list):
        if command and isinstance(command[0], str) and is_template(command[0]):
            yield command[0]
        return
    if not isinstance(command, str):
        return
    try:
        pieces = split_words(command)
    except ShellSyntaxError:
        return
    for words in simple_commands(pieces):
        first = next((w for w in words if not _ASSIGNMENT.match(w.template)), None)
        if isinstance(first, Word) and first.has_tag:
            yield first.template


def code_fields(root: Any) -> Iterator[tuple[str, KeyPath]]:
    """The templates of the raw playbook whose value is executed: each launcher, each
    command's program word."""
    plain = to_plain(root) if isinstance(root, Mapping) else {}
    validate = plain.get("validate")
    if isinstance(validate, Mapping):
        for word in _program_words(validate.get("command")):
            yield word, ("validate", "command")
    work = plain.get("work")
    for key in ("cordon", "uncordon"):
        for word in _program_words(work.get(key) if isinstance(work, Mapping) else None):
            yield word, ("work", key)
    steps = plain.get("steps")
    for index, step in enumerate(steps if isinstance(steps, list) else []):
        params = step.get("params") if isinstance(step, Mapping) else None
        if not isinstance(params, Mapping):
            continue
        launcher = params.get("launcher")
        if isinstance(launcher, str):
            yield launcher, ("steps", index, "params", "launcher")
        for word in _program_words(params.get("command")):
            yield word, ("steps", index, "params", "command")


def _names(text: str) -> set[str]:
    """Every name a template reads, guarded or not (`x | default(..)` too)."""
    return {str(path[0]) for path in paths_used(text, "template")}


def _closure(names: set[str], playbook_vars: Mapping[str, Any]) -> set[str]:
    """The names, and every name a playbook var among them uses, transitively."""
    seen: set[str] = set()
    todo = list(names)
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        for text in strings_in(playbook_vars.get(name)):
            todo.extend(_names(text))
    return seen


def check_host_vars(doc: YamlDoc, host_vars: Mapping[str, Any], overrides: Mapping[str, Any],
                    host: str, reserved: frozenset[str]) -> None:
    """Refuse a host var that is reserved, holds a control character, or reaches code."""
    for name, value in host_vars.items():
        if name in reserved:
            raise HostVarRefused(
                f"inventory var {name!r} (host {host}) takes a name reserved for the template "
                "context; rename it", host, name)
        bad = control_character([name, value])
        if bad is not None:
            raise HostVarRefused(
                f"inventory var {name!r} (host {host}) holds the control character {bad}; "
                "values may not hold NUL or control characters (tab and newline excepted)",
                host, name)
    root = doc.root
    raw_vars = to_plain(root.get("vars")) if isinstance(root, Mapping) else None
    playbook_vars = raw_vars if isinstance(raw_vars, Mapping) else {}
    for text, path in code_fields(root):
        used = _closure(_names(text), playbook_vars)
        if "host" in used:
            raise ConfigError(
                "`host` (the inventory's values: host.vars, host.name, ...) in what is "
                "executed: inventory values are data. Name the program in the playbook, and "
                "pass such values as arguments or in env", doc.location(path))
        from_inventory = sorted(n for n in used if n in host_vars and n not in overrides)
        if from_inventory:
            name = from_inventory[0]
            raise HostVarRefused(
                f"inventory var {name!r} (host {host}) would set {doc.location(path)}, which "
                "is executed: inventory values are data. Set it in the playbook (its vars) or "
                "with --set, not in the inventory", host, name)
