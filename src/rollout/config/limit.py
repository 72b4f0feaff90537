"""`--limit` as Ansible reads it (ansible-core's inventory/manager.py: split_host_pattern,
InventoryManager.subset, order_patterns, _match_one_pattern, _split_subscript and
_enumerate_matches), over host names and groups only: pure functions, no inventory.

A limit is patterns separated by `,` (or by `:` when it has no comma and is not one host
address such as `host:22` or an IPv6 address). Each pattern is a host or group name, an
fnmatch glob (`*`, `?`, `[...]`), a regex after `~` (matched from the name's start), `all`,
or `@FILE`: a file with one pattern per line. A pattern may end in a subscript: `g[0]`,
`g[-1]`, `g[1:3]` (inclusive), `g[2:]`. `!p` removes p's hosts, `&p` keeps only p's hosts;
plain patterns apply first, then every `&`, then every `!`, whatever their order. Where
Ansible warns "Could not match supplied host pattern" and goes on, rollout stops (exit 2)
naming the pattern and where it was written.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from fnmatch import fnmatchcase
from pathlib import Path

from rollout.errors import ConfigError, Location, UserError
from rollout.readfile import read_lines

MAX_REGEX = 256  # Python's re has no timeout: a longer `~regex` is refused unread
MAX_FILE = 1024 * 1024
MAX_LINE = 4096
SUBSCRIPT = re.compile(r"^(.+)\[(?:(-?[0-9]+)|([0-9]+)([:-])([0-9]*))\]$")
_RANGE = r"\[(?:[a-z]:[a-z]|[0-9]+:[0-9]+)(?::[0-9]+)?\]"
_LABEL = rf"(?:\w|{_RANGE})(?:[\w-]|{_RANGE})*(?<![_-])"
_NUMBER = r"(?:[01]?[0-9]{1,2}|2[0-4][0-9]|25[0-5]|\[[0-9]+:[0-9]+(?::[0-9]+)?\])"
_ADDRESS = re.compile(rf"^(?:{_LABEL}(?:\.{_LABEL})*|(?:{_NUMBER}\.){{3}}{_NUMBER})$",
                      re.I)  # fmt: skip
_HOSTPORT = re.compile(r"^((?:[^:\[\]]|\[[^\]]*\])*):[0-9]+$")
_BRACKETED = re.compile(r"^\[(.+)\]:[0-9]+$")
_COLON_PARTS = re.compile(r"(?:[^\s:\[\]]|\[[^\]]*\])+")


@dataclass(frozen=True)
class Pattern:
    text: str
    where: Location  # `--limit` itself, or FILE:LINE of an @FILE


@dataclass(frozen=True)
class Universe:
    """What a limit picks from: every host name (inventory order) and each group's hosts
    (`all` and `ungrouped` included, each group's own order)."""

    hosts: Sequence[str]
    groups: Mapping[str, Sequence[str]]


def split(limit: str) -> list[str]:
    """Ansible's split_host_pattern: `,`-separated; else `:`-separated unless the whole is
    one host address (a name or IPv4 with a `:port`, an IPv6 address)."""
    if "," in limit:
        parts = limit.split(",")
    elif _one_address(limit):
        parts = [limit]
    else:
        parts = _COLON_PARTS.findall(limit)
    return [p.strip() for p in parts if p.strip()]


def _one_address(text: str) -> bool:
    """As Ansible's parse_address: a name or IPv4 (`[...]` ranges allowed) or an IPv6
    address, after a `:port` (or `[host]:port`) is taken off."""
    port = _BRACKETED.match(text) or _HOSTPORT.match(text)
    host = port.group(1) if port else text
    if _ADDRESS.match(host):
        return True
    try:
        ipaddress.IPv6Address(host)
    except ValueError:
        return False
    return True


def patterns(limit: str) -> list[Pattern]:
    """The patterns of `limit`, each `@FILE` replaced by its lines (one pattern a line, as
    Ansible reads it: a line is never split again)."""
    where = Location(f"--limit {limit!r}")
    out: list[Pattern] = []
    for part in split(limit):
        if part.startswith("@"):
            out.extend(_file_patterns(Path(part[1:])))
        else:
            out.append(Pattern(part, where))
    return out


def _file_patterns(path: Path) -> list[Pattern]:
    out = []
    for number, raw in read_lines(path, "--limit file", max_line=MAX_LINE, limit=MAX_FILE):
        where = Location(str(path), number)
        if raw is None:
            raise ConfigError(f"a line longer than {MAX_LINE} bytes", where)
        try:
            text = raw.decode("utf-8").strip()
        except UnicodeDecodeError:
            raise ConfigError("the line is not UTF-8 text", where) from None
        if text:
            out.append(Pattern(text, where))
    return out


def select(universe: Universe, limit: str | None) -> list[str]:
    """The host names `limit` picks, in inventory order: every host when it is None or
    empty. UserError (exit 2) for a pattern that matches no host nor group, a bad regex or
    subscript."""
    if not limit or not limit.strip():
        return list(universe.hosts)
    chosen: set[str] = set()
    for pattern in order(patterns(limit)):
        text = pattern.text
        found = {text} if text in universe.hosts else set(_match_one(universe, pattern))
        if text[0] == "!":
            chosen -= found
        elif text[0] == "&":
            chosen &= found
        else:
            chosen |= found
    return [h for h in universe.hosts if h in chosen]


def order(found: list[Pattern]) -> list[Pattern]:
    """Ansible's order_patterns: plain patterns, then `&`, then `!`; `all` first when
    there is no plain one."""
    plain = [p for p in found if p.text[0] not in "!&"]
    both = [p for p in found if p.text[0] == "&"]
    minus = [p for p in found if p.text[0] == "!"]
    where = found[0].where if found else Location("--limit")
    return (plain or [Pattern("all", where)]) + both + minus


def _match_one(universe: Universe, pattern: Pattern) -> list[str]:
    text = pattern.text[1:] if pattern.text[0] in "!&" else pattern.text
    expr, subscript = _split_subscript(text)
    hosts = _enumerate(universe, expr, pattern)
    if not hosts or subscript is None:
        return hosts
    start, end = subscript
    try:
        if not end:  # as Ansible: a single index, and `[x:0]` reads as `[x]`
            return [hosts[start]]
        return hosts[start:(len(hosts) - 1 if end == -1 else end) + 1]
    except IndexError:
        raise UserError(f"{pattern.where}: {pattern.text!r}: no host at that position "
                        f"({expr!r} has {len(hosts)})") from None  # fmt: skip


def _split_subscript(text: str) -> tuple[str, tuple[int, int | None] | None]:
    found = None if text.startswith("~") else SUBSCRIPT.match(text)
    if found is None:
        return text, None
    expr, index, start, _, end = found.groups()
    if index:
        return expr, (int(index), None)
    return expr, (int(start), int(end) if end else -1)


def _enumerate(universe: Universe, expr: str, pattern: Pattern) -> list[str]:
    """Ansible's _enumerate_matches: the hosts of every group `expr` matches; and the hosts
    it matches by name when no group matched or it is a glob or regex."""
    matches = _matcher(expr, pattern)
    groups = [g for g in universe.groups if matches(g)]
    found = [h for g in groups for h in universe.groups[g]]
    if not groups or expr[0] == "~" or any(c in expr for c in ".?*["):
        found.extend(h for h in universe.hosts if matches(h))
    if not found and not groups and expr != "all":
        raise UserError(f"{pattern.where}: {expr!r} matches no host or group (Ansible: "
                        f"\"Could not match supplied host pattern\"); hosts: "
                        f"{_names(universe.hosts)}; groups: {_names(universe.groups)}")
    return list(dict.fromkeys(found))


def _matcher(expr: str, pattern: Pattern) -> Callable[[str], bool]:
    """fnmatch for a glob; for `~regex`, re.match (anchored at the start only, as Ansible)."""
    if not expr.startswith("~"):
        return lambda name: fnmatchcase(name, expr)
    if len(expr) > MAX_REGEX:
        raise UserError(f"{pattern.where}: a regex longer than {MAX_REGEX} characters")
    try:
        regex = re.compile(expr[1:])
    except re.error as e:
        raise UserError(f"{pattern.where}: {expr!r} is not a regex: {e}") from None
    return lambda name: regex.match(name) is not None


def _names(names: Sequence[str] | Mapping[str, object], most: int = 20) -> str:
    shown = [n for n in names if n not in ("all", "ungrouped")]
    more = f" and {len(shown) - most} more" if len(shown) > most else ""
    return (", ".join(shown[:most]) or "none") + more
