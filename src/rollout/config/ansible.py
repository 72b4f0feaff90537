"""Ansible inventories (INI and YAML) read as rollout inventories.

What is read: hosts, groups, `children` groups, host vars, group vars and `all` vars, merged
the way Ansible merges them (all, then groups from the shallowest to the deepest, siblings
by name, then the host's own vars). Connection vars: ansible_host, ansible_port,
ansible_user, ansible_ssh_private_key_file (and their old ansible_ssh_* names); rollout's
own SSH settings come from rollout_known_hosts, rollout_host_key_policy and
rollout_connect_timeout. Every other var is a template var, as it is in fleet.yaml.

What is refused (exit 2, naming the file, line and key): host ranges (`web[01:10]`),
inventory plugins and scripts, Vault-encrypted values, a connection other than ssh, and
anything Ansible itself would refuse (an undefined group in `:vars` or `:children`, a
cycle of children). Values are data: nothing is templated, imported or run.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from rollout.errors import ConfigError, Location

from .inventory import HostEntry

CONNECTION_VARS = {
    "address": ("ansible_host", "ansible_ssh_host"),
    "port": ("ansible_port", "ansible_ssh_port"),
    "user": ("ansible_user", "ansible_ssh_user"),
    "key_file": ("ansible_ssh_private_key_file", "ansible_private_key_file"),
    "known_hosts": ("rollout_known_hosts",),
    "host_key_policy": ("rollout_host_key_policy",),
    "connect_timeout": ("rollout_connect_timeout",),
}
SSH_CONNECTIONS = {"ssh", "paramiko", "smart"}
NOT_TEMPLATE_VARS = {"ansible_connection"} | {n for ns in CONNECTION_VARS.values() for n in ns}


@dataclass(frozen=True)
class Value:
    """A var's value and where it was set (for errors)."""

    value: Any
    line: int | None


@dataclass
class Group:
    name: str
    line: int | None
    vars: dict[str, Value] = field(default_factory=dict)
    children: list[str] = field(default_factory=list)
    hosts: list[str] = field(default_factory=list)


@dataclass
class HostDecl:
    name: str
    line: int | None
    vars: dict[str, Value] = field(default_factory=dict)


@dataclass
class Parsed:
    """What an INI or YAML inventory said, before Ansible's merge rules."""

    file: Path
    groups: dict[str, Group] = field(default_factory=dict)
    hosts: dict[str, HostDecl] = field(default_factory=dict)

    def group(self, name: str, line: int | None) -> Group:
        if name not in self.groups:
            self.groups[name] = Group(name, line)
        return self.groups[name]

    def host(self, name: str, line: int | None, group: str) -> HostDecl:
        """Declare `name` (again) as a member of `group`; later vars win."""
        if name not in self.hosts:
            self.hosts[name] = HostDecl(name, line)
        members = self.group(group, line).hosts
        if name not in members:
            members.append(name)
        return self.hosts[name]

    def error(self, message: str, line: int | None, key: str | None = None) -> ConfigError:
        return ConfigError(message, Location(str(self.file), line, key))


def host_entries(parsed: Parsed) -> list[HostEntry]:
    """One validated fleet.yaml-style entry per host, in the order hosts were declared."""
    depth = _depths(parsed)
    member_of = _memberships(parsed)
    entries = []
    for name, decl in parsed.hosts.items():
        groups = sorted(member_of[name] - {"all"}, key=lambda g: (depth[g], g))
        merged: dict[str, Value] = dict(parsed.groups["all"].vars)
        for group in groups:
            merged.update(parsed.groups[group].vars)
        merged.update(decl.vars)
        entries.append(_entry(parsed, decl, [g for g in groups if g != "ungrouped"], merged))
    return entries


def _depths(parsed: Parsed) -> dict[str, int]:
    """Each group's depth below `all` (its longest path); a cycle is an error."""
    depth: dict[str, int] = {}

    def visit(name: str, level: int, path: tuple[str, ...]) -> None:
        if name in path:
            cycle = " -> ".join((*path[path.index(name):], name))
            raise parsed.error(f"groups are children of each other: {cycle}",
                               parsed.groups[name].line, name)  # fmt: skip
        if depth.get(name, -1) >= level:
            return
        depth[name] = level
        for child in parsed.groups[name].children:
            visit(child, level + 1, (*path, name))

    visit("all", 0, ())
    for name in parsed.groups:  # a group out of reach of `all` is in a cycle of children
        if name not in depth:
            visit(name, 1, ())
    return depth


def _memberships(parsed: Parsed) -> dict[str, set[str]]:
    """Every group each host is in, directly or through children groups."""
    out: dict[str, set[str]] = {name: set() for name in parsed.hosts}

    def collect(group: str, seen: frozenset[str]) -> set[str]:
        found = set(parsed.groups[group].hosts)
        for child in parsed.groups[group].children:
            if child not in seen:
                found |= collect(child, seen | {child})
        return found

    for group in parsed.groups:
        for host in collect(group, frozenset({group})):
            out[host].add(group)
    return out


def _entry(parsed: Parsed, decl: HostDecl, groups: list[str],
           merged: dict[str, Value]) -> HostEntry:  # fmt: skip
    connection = merged.get("ansible_connection")
    if connection is not None and str(connection.value) not in SSH_CONNECTIONS:
        raise parsed.error(f"ansible_connection {connection.value!r} is not supported; "
                           "rollout reaches hosts over SSH", connection.line,
                           "ansible_connection")  # fmt: skip
    fields: dict[str, Any] = {"name": decl.name, "address": decl.name, "groups": groups}
    origin: dict[str, tuple[str, int | None]] = {"name": ("host", decl.line)}
    for key, names in CONNECTION_VARS.items():
        var = next((n for n in names if n in merged), None)
        if var is not None:
            fields[key] = merged[var].value
            origin[key] = (var, merged[var].line)
    fields["vars"] = {k: v.value for k, v in merged.items() if k not in NOT_TEMPLATE_VARS}
    try:
        return HostEntry.model_validate(fields)
    except ValidationError as exc:
        err = exc.errors(include_url=False)[0]
        key = str(err["loc"][0]) if err["loc"] else "host"
        var, line = origin.get(key, ("host", decl.line))
        shown = f"{decl.name}: {var}" if var != "host" else decl.name
        raise parsed.error(str(err["msg"]).removeprefix("Value error, "), line, shown) from None


def finish(parsed: Parsed) -> Parsed:
    """`all` and `ungrouped` exist; every group without a parent is a child of `all`."""
    parsed.group("all", None)
    parsed.group("ungrouped", None)
    children = {c for g in parsed.groups.values() for c in g.children}
    for name in parsed.groups:
        if name != "all" and name not in children:
            parsed.groups["all"].children.append(name)
    return parsed
