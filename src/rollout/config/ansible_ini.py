"""Ansible's INI inventory format, strictly: `[group]`, `[group:vars]`, `[group:children]`,
host lines `NAME[:PORT] key=value ...`, `#` and `;` comment lines. Values are read as
ansible-core 2.19 reads them (a Python literal when it is one, else the text) and stay data.

Inline comments, as Ansible: on a host line, ` # ...` ends the line (shlex); in a
`[group:vars]` line the value is everything after the first `=`, so `x=eu # note` is the
text "eu # note", while `x=1 # note` is the number 1 (a Python comment after a literal).
`rollout inventory` points such values out."""

from __future__ import annotations

import ast
import re
import shlex
import warnings
from pathlib import Path
from typing import Any

from rollout.readfile import read_text

from .ansible import Parsed, Value, finish, split_port

SECTION = re.compile(r"\[([^\[\]:\s]+)(?::(vars|children|[^\]]*))?\]")
KEY = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
RANGE = re.compile(r"\[[^\]]*:[^\]]*\]")


def literal(text: str) -> Any:
    """Ansible's `_parse_value`: a Python literal (number, string, list, dict, bool, None)
    when the text is one, else the text; tuples and sets become lists, bytes text, `...`
    and complex numbers their text. ast.literal_eval never runs code."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", SyntaxWarning)
            value = ast.literal_eval(text)
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        return text
    return _plain(value)


def _plain(value: Any) -> Any:
    if isinstance(value, (list, tuple, set)):
        return [_plain(v) for v in value]
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, bytes):
        return value.decode("utf-8", "surrogateescape")
    if value is Ellipsis:
        return "..."
    if isinstance(value, complex):
        return str(value)
    return value


def parse_ini(file: Path, text: str) -> Parsed:
    parsed = Parsed(file)
    group, kind = "ungrouped", "hosts"
    declared: dict[str, int] = {}  # groups with a [group] or [group:children] section
    pending: list[tuple[str, int, str]] = []  # (group, line, why) that must be declared
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line or line[0] in "#;":
            continue
        if line.startswith("["):
            group, kind = _section(parsed, line, number)
            parsed.group(group, number)
            if kind == "vars":
                pending.append((group, number, f"[{group}:vars] names a group"))
            else:
                declared.setdefault(group, number)
        elif kind == "hosts":
            _host_line(parsed, group, line, number)
        elif kind == "vars":
            key, value = _assignment(parsed, line, number)
            parsed.set_group_var(group, key, Value(literal(value.strip()), number))
        else:
            _child_line(parsed, group, line, number, pending)
    for name, number, why in pending:
        if name not in declared and name not in ("all", "ungrouped"):
            raise parsed.error(f"{why} that is defined nowhere", number, name)
    return finish(parsed)


def _section(parsed: Parsed, line: str, number: int) -> tuple[str, str]:
    match = SECTION.fullmatch(re.split(r"\s+[#;]", line, maxsplit=1)[0].strip())
    if not match:
        raise parsed.error(f"not a section header: {line!r} (expected [group], "
                           "[group:vars] or [group:children])", number)  # fmt: skip
    name, kind = match.group(1), match.group(2) or "hosts"
    if kind not in ("hosts", "vars", "children"):
        raise parsed.error(f"unknown section kind :{kind} (expected :vars or :children)",
                           number, name)  # fmt: skip
    return name, kind


def _split(parsed: Parsed, line: str, number: int) -> list[str]:
    try:
        return shlex.split(line, comments=True)
    except ValueError as exc:
        raise parsed.error(f"cannot split the line: {exc}", number) from None


def _host_line(parsed: Parsed, group: str, line: str, number: int) -> None:
    first, *assignments = _split(parsed, line, number)
    if RANGE.search(first):
        raise parsed.error(f"host ranges ({first}) are not supported: list each host",
                           number, first)  # fmt: skip
    name, port = split_port(parsed, first, number)
    host = parsed.host(name, number, group)
    if port is not None:
        host.vars["ansible_port"] = Value(port, number)
    for token in assignments:
        key, value = _assignment(parsed, token, number, name)
        host.vars[key] = Value(literal(value), number)


def _assignment(parsed: Parsed, token: str, number: int,
                host: str | None = None) -> tuple[str, str]:  # fmt: skip
    key, sep, value = token.partition("=")
    key = key.strip()
    if not sep or not KEY.fullmatch(key):
        where = f" after host {host!r}" if host else ""
        raise parsed.error(f"expected key=value{where}, got {token!r}", number, host)
    return key, value


def _child_line(parsed: Parsed, group: str, line: str, number: int,
                pending: list[tuple[str, int, str]]) -> None:  # fmt: skip
    tokens = _split(parsed, line, number)
    if len(tokens) != 1:
        raise parsed.error(f"expected one group name in [{group}:children], got {line!r}",
                           number, group)  # fmt: skip
    child = tokens[0]
    parsed.group(child, number)
    if child not in parsed.groups[group].children:
        parsed.groups[group].children.append(child)
    pending.append((child, number, f"[{group}:children] includes a group"))


def read_ini(path: Path) -> Parsed:
    return parse_ini(path, read_text(path, "inventory file"))
