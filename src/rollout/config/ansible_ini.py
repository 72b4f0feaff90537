"""Ansible's INI inventory format, strictly: `[group]`, `[group:vars]`, `[group:children]`,
host lines `NAME[:PORT] key=value ...`, `#` and `;` comments. Values are read as Ansible
reads them (a Python literal when it is one, else a string) and stay data."""

from __future__ import annotations

import ast
import re
import shlex
from pathlib import Path
from typing import Any

from rollout.errors import ConfigError, Location

from .ansible import Parsed, Value, finish

SECTION = re.compile(r"\[([^\[\]:\s]+)(?::(vars|children|[^\]]*))?\]")
KEY = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
RANGE = re.compile(r"\[[^\]]*:[^\]]*\]")


def literal(text: str) -> Any:
    """Ansible's rule: a Python literal (number, string, list, dict, bool, None) when the
    text is one and has no `#`, else the text. ast.literal_eval never runs code."""
    if "#" in text:
        return text
    try:
        return ast.literal_eval(text)
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        return text


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
            parsed.groups[group].vars[key] = Value(literal(value.strip()), number)
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
    name, port = _name_and_port(parsed, first, number)
    host = parsed.host(name, number, group)
    if port is not None:
        host.vars["ansible_port"] = Value(port, number)
    for token in assignments:
        key, value = _assignment(parsed, token, number, name)
        host.vars[key] = Value(literal(value), number)


def _name_and_port(parsed: Parsed, token: str, number: int) -> tuple[str, int | None]:
    """`name:port`; an IPv6 address (more than one `:`) has no port suffix here."""
    if token.count(":") != 1:
        return token, None
    name, port = token.split(":")
    if not port.isdigit():
        raise parsed.error(f"port {port!r} of host {name!r} is not a number", number, name)
    return name, int(port)


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
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ConfigError("inventory file not found", Location(str(path))) from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"cannot read inventory file: {exc}", Location(str(path))) from None
    return parse_ini(path, text)
