"""`rollout inventory`: what rollout made of an inventory, as data (the shape of
`ansible-inventory --list`: each group's hosts and children, and per host under
`_meta.hostvars` its connection settings and vars, each value with where it came from), or
as a tree of groups and hosts (`--graph`). Reads files only; contacts no host.

Every name and value is hostile data: the JSON escapes every control character (and all
non-ASCII), the tree shows a control character as its escape (`\\x1b`)."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rollout.config.ansible import (
    CONNECTION_VARS,
    IGNORED_VARS,
    NOT_TEMPLATE_VARS,
    Merged,
    Parsed,
    Value,
    ansible_var_warnings,
    merge,
    proxy_jump,
)
from rollout.config.ansible_vars import read_ansible
from rollout.config.inventory import Host, Inventory, load_inventory
from rollout.config.vastai import is_ref
from rollout.config.yamlfile import YamlDoc, load_yaml

UNSET = "not set in the inventory: rollout's default (or ssh_config)"
FIELDS = ("address", "port", "user", "key_file", "known_hosts", "host_key_policy",
          "connect_timeout")  # fmt: skip


@dataclass
class View:
    """Groups (name -> hosts and children) and hosts (name -> settings, vars, sources)."""

    inventory: str
    groups: dict[str, dict[str, list[str]]] = field(default_factory=dict)
    hosts: dict[str, dict[str, Any]] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)


def describe(ref: str) -> View:
    """The inventory `ref` (a file or vastai:LABEL) as rollout reads it."""
    inventory = load_inventory(ref)
    parsed = None if is_ref(ref) else read_ansible(Path(ref))
    view = View(str(inventory.path))
    if parsed is not None:
        _from_ansible(view, inventory, parsed)
    else:
        _from_fleet(view, inventory, None if is_ref(ref) else load_yaml(Path(ref), "inventory"))
    view.notes.extend(f"{name}: refused, the other hosts go on: {why}"
                      for name, why in inventory.refused.items())
    return view


def _settings(host: Host) -> dict[str, Any]:
    out: dict[str, Any] = {name: getattr(host, name) for name in FIELDS}
    out["key_file"] = None if host.key_file is None else str(host.key_file)
    out["known_hosts"] = str(host.known_hosts)
    out["proxy_jump"] = [f"{j.user}@{j.address}:{j.port}" for j in host.proxy_jump] or None
    out["groups"] = list(host.groups)
    out["vars"] = dict(host.vars)
    return out


def _from_ansible(view: View, inventory: Inventory, parsed: Parsed) -> None:
    merged = {m.name: m for m in merge(parsed)}
    alone = [m.name for m in merged.values() if not set(m.groups) - {"ungrouped"}]
    for name, group in parsed.groups.items():
        hosts = alone if name == "ungrouped" else [h for h in group.hosts if h not in alone]
        view.groups[name] = {"children": list(group.children), "hosts": hosts}
    view.groups["all"]["hosts"] = []  # as Ansible: a host only in `all` is in `ungrouped`
    children = view.groups["all"]["children"]
    children.sort(key=lambda g: g != "ungrouped")  # Ansible makes `ungrouped` first
    warnings, notes = ansible_var_warnings(parsed)
    view.notes.extend([*(f"warning: {w}" for w in warnings), *notes])
    for host in inventory.hosts:
        one = merged[host.name]
        sources = _ansible_sources(parsed, one)
        view.hosts[host.name] = {**_settings(host), "sources": sources}
        view.notes.extend(_notes(parsed, one))


def _where(parsed: Parsed, value: Value, var: str | None = None) -> str:
    place = str(value.file or parsed.file) + ("" if value.line is None else f":{value.line}")
    return f"{place}: {var}" if var else place


def _ansible_sources(parsed: Parsed, host: Merged) -> dict[str, str]:
    decl = parsed.hosts[host.name]
    sources = {"name": _where(parsed, Value(host.name, decl.line))}
    for key, names in CONNECTION_VARS.items():
        var = next((n for n in names if n in host.vars), None)
        sources[key] = UNSET if var is None else _where(parsed, host.vars[var], var)
    if sources["address"] == UNSET:
        sources["address"] = "the host's name (or ssh_config's HostName for it)"
    jump = proxy_jump(parsed, host.vars)
    sources["proxy_jump"] = UNSET if jump is None else _where(parsed, host.vars[jump[1]], jump[1])
    for key, value in host.vars.items():
        if key not in NOT_TEMPLATE_VARS:
            sources[f"vars.{key}"] = _where(parsed, value)
    return sources


def _notes(parsed: Parsed, host: Merged) -> list[str]:
    """Values worth a second look: an ignored connection var, a comment kept in a value."""
    notes = []
    for key, value in host.vars.items():
        where = _where(parsed, value, key)
        if key in IGNORED_VARS or (key.startswith("ansible_") and key.endswith("_interpreter")):
            why = IGNORED_VARS.get(key, "host scripts run with the host's python3")
            notes.append(f"{host.name}: {where}: ignored ({why})")
        elif isinstance(value.value, str) and (" #" in value.value or " ;" in value.value):
            notes.append(f"{host.name}: {where}: the value {value.value!r} keeps the text "
                         "after ' #' or ' ;', as Ansible keeps it in an INI vars line")  # fmt: skip
    return notes


def _from_fleet(view: View, inventory: Inventory, doc: YamlDoc | None) -> None:
    alone = [h.name for h in inventory.hosts if not h.groups]
    view.groups["all"] = {"children": ["ungrouped"], "hosts": []}
    view.groups["ungrouped"] = {"children": [], "hosts": alone}
    for group, members in inventory.groups.items():
        view.groups["all"]["children"].append(group)
        view.groups[group] = {"children": [], "hosts": [h.name for h in members]}
    entries = _fleet_entries(doc)
    for host in inventory.hosts:
        view.hosts[host.name] = {**_settings(host), "sources": _fleet_sources(doc, entries, host)}
    view.notes.extend(inventory.skipped)


def _fleet_entries(doc: YamlDoc | None) -> dict[str, tuple[int, Mapping[str, Any]]]:
    """Each host entry of a fleet.yaml by name: its index and its mapping."""
    if doc is None or not isinstance(doc.root, Mapping):
        return {}
    hosts = doc.root.get("hosts") or []
    return {str(e.get("name")): (i, e) for i, e in enumerate(hosts) if isinstance(e, Mapping)}


def _fleet_sources(doc: YamlDoc | None, entries: dict[str, tuple[int, Mapping[str, Any]]],
                   host: Host) -> dict[str, str]:  # fmt: skip
    if doc is None or host.name not in entries:
        return {"*": "the vast.ai API (vastai:LABEL)"}
    index, entry = entries[host.name]
    defaults = doc.root.get("defaults") or {}

    def where(key: str, sub: str | None = None) -> str:
        own, dflt = entry.get(key), defaults.get(key) if isinstance(defaults, Mapping) else None
        for found, path in ((own, ("hosts", index, key)), (dflt, ("defaults", key))):
            if found is not None and (sub is None or (isinstance(found, Mapping) and sub in found)):
                return str(doc.location(path if sub is None else (*path, sub)))
        return UNSET

    sources = {"name": str(doc.location(("hosts", index, "name")))}
    sources.update({key: where(key) for key in (*FIELDS, "proxy_jump")})
    sources.update({f"vars.{k}": where("vars", k) for k in host.vars})
    return sources


def host_vars(ref: str, name: str) -> str:
    """`ansible-inventory --host NAME`: the host's merged vars as JSON (sorted keys, indent
    4). A fleet.yaml or vast.ai host: its vars and its connection settings by their Ansible
    names."""
    inventory = load_inventory(ref)
    host = inventory.get(name)  # an unknown or refused host: UserError naming it
    parsed = None if is_ref(ref) else read_ansible(Path(ref))
    if parsed is not None:
        merged = next(m for m in merge(parsed) if m.name == name)
        found = {key: value.value for key, value in merged.vars.items()}
    else:
        found = {"ansible_host": host.address, "ansible_port": host.port,
                 "ansible_user": host.user, **dict(host.vars)}  # fmt: skip
        if host.key_file is not None:
            found["ansible_ssh_private_key_file"] = str(host.key_file)
    return json.dumps(found, sort_keys=True, indent=4, ensure_ascii=True, default=str)


def as_json(view: View) -> str:
    """ansible-inventory's --list shape; ensure_ascii escapes every control character."""
    out: dict[str, Any] = {"_meta": {"inventory": view.inventory, "hostvars": view.hosts,
                                     "notes": view.notes}}  # fmt: skip
    for name, body in view.groups.items():
        out[name] = {k: v for k, v in body.items() if v}
    return json.dumps(out, indent=2, ensure_ascii=True, default=str)


def shown(text: Any) -> str:
    """`text` with each non-printable character as its Python escape (`\\x1b`)."""
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in str(text))


def as_graph(view: View) -> str:
    """A tree as `ansible-inventory --graph` draws it: groups start with @, children
    groups before hosts, in the order the inventory gave them."""
    lines = ["@all:"]

    def walk(group: str, depth: int, seen: frozenset[str]) -> None:
        body = view.groups.get(group, {"children": [], "hosts": []})
        pad = "  |" * depth
        for child in body["children"]:
            if child in seen:
                continue
            lines.append(f"{pad}--@{shown(child)}:")
            walk(child, depth + 1, seen | {child})
        for host in body["hosts"]:
            lines.append(f"{pad}--{shown(host)}")

    walk("all", 1, frozenset({"all"}))
    return "\n".join(lines)
