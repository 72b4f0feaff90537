"""Ansible's YAML inventory format: top-level groups (usually `all`), each with `hosts`
(name: vars or null; `name:port` sets the SSH port, as Ansible reads a host pattern),
`vars` and `children` (groups, recursively).

Ansible reads YAML 1.1 (PyYAML), rollout YAML 1.2 (ruamel): plain yes/no/on/off (any case
Ansible accepts) are made booleans as Ansible makes them; octal `0755` and sexagesimal
`12:30` are not (Ansible: 493 and 750; rollout: 755 and "12:30"): quote such values."""

from __future__ import annotations

import datetime
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from rollout.errors import ConfigError, Location

from .ansible import Parsed, Value, finish, split_port
from .ansible_detect import GROUP_KEYS
from .yamlfile import KeyPath, YamlDoc, load_yaml

PLAIN: tuple[type[Any], ...] = (bool, int, float, str)
# Ansible reads YAML as YAML 1.1 (PyYAML): these plain words are booleans there, while
# ruamel reads YAML 1.2, where they are strings (`enabled: no` would be a truthy "no").
YAML11_BOOLS = {
    word: value
    for words, value in (("yes true on", True), ("no false off", False))
    for base in words.split()
    for word in (base, base.capitalize(), base.upper())
}


def parse_yaml(doc: YamlDoc) -> Parsed:
    doc = load_yaml(doc.path, "inventory", quotes=True)  # plain `yes` and quoted "yes" differ
    parsed = Parsed(doc.path)
    if not isinstance(doc.root, Mapping):
        raise _error(parsed, doc, (), "an Ansible YAML inventory is a mapping of groups")
    if "plugin" in doc.root:
        raise _error(parsed, doc, ("plugin",), "inventory plugins are not supported; "
                     "export the hosts with `ansible-inventory --list --yaml`")  # fmt: skip
    for name, body in doc.root.items():
        _group(parsed, doc, str(name), body, (name,))
    return finish(parsed)


def _error(parsed: Parsed | None, doc: YamlDoc, path: KeyPath, message: str) -> Exception:
    return ConfigError(message, doc.location(path))


def _mapping(parsed: Parsed | None, doc: YamlDoc, node: Any, path: KeyPath) -> Mapping[Any, Any]:
    if node is None:
        return {}
    if not isinstance(node, Mapping):
        raise _error(parsed, doc, path, f"expected a mapping, got {type(node).__name__}")
    return node


def _group(parsed: Parsed, doc: YamlDoc, name: str, body: Any, path: KeyPath) -> None:
    group = parsed.group(name, doc.line_of(path))
    node = _mapping(parsed, doc, body, path)
    for key in node:
        if key not in GROUP_KEYS:
            raise _error(parsed, doc, (*path, key), "unknown group key; expected one of: "
                         "hosts, vars, children")  # fmt: skip
    for host, host_vars in _mapping(parsed, doc, node.get("hosts"), (*path, "hosts")).items():
        where = (*path, "hosts", host)
        if "[" in str(host):
            raise _error(parsed, doc, where, "host ranges are not supported: list each host")
        line = doc.line_of(where)
        host_name, port = split_port(parsed, str(host), line)
        decl = parsed.host(host_name, line, name)
        if port is not None:
            decl.vars["ansible_port"] = Value(port, line)
        decl.vars.update(_vars(parsed, doc, host_vars, where))
    for key, value in _vars(parsed, doc, node.get("vars"), (*path, "vars")).items():
        parsed.set_group_var(group.name, key, value)
    for child, child_body in _mapping(parsed, doc, node.get("children"),
                                      (*path, "children")).items():  # fmt: skip
        if str(child) not in group.children:
            group.children.append(str(child))
        _group(parsed, doc, str(child), child_body, (*path, "children", child))


def _vars(parsed: Parsed | None, doc: YamlDoc, node: Any, path: KeyPath,
          file: Path | None = None) -> dict[str, Value]:  # fmt: skip
    """The vars mapping at `path`, each value plain data with its line (and `file`)."""
    out = {}
    for key, value in _mapping(parsed, doc, node, path).items():
        out[str(key)] = Value(plain(parsed, doc, value, (*path, key)),
                              doc.line_of((*path, key)), file)  # fmt: skip
    return out


def vars_file(doc: YamlDoc) -> dict[str, Value]:
    """A group_vars/host_vars file: a mapping of vars (empty: none), each from `doc.path`."""
    if not isinstance(doc.root, Mapping):
        kind = "a list" if isinstance(doc.root, list) else f"the value {str(doc.root)[:40]!r}"
        raise ConfigError(f"expected a mapping of vars, got {kind}", Location(str(doc.path), 1))
    return _vars(None, doc, doc.root, (), doc.path)


def plain(parsed: Parsed | None, doc: YamlDoc, node: Any, path: KeyPath) -> Any:
    """Plain data; a tagged value (`!vault`, `!unsafe`, ...) is refused, not interpreted."""
    if isinstance(node, Mapping):
        return {str(k): plain(parsed, doc, v, (*path, k)) for k, v in node.items()}
    if isinstance(node, list):
        return [plain(parsed, doc, v, (*path, i)) for i, v in enumerate(node)]
    if getattr(node, "tag", None) is not None and getattr(node.tag, "value", None):
        raise _error(parsed, doc, path, f"tagged values ({node.tag.value}) are not supported "
                     "(Ansible Vault values included): give the plain value")  # fmt: skip
    if node is None:
        return None
    if type(node) is str and node in YAML11_BOOLS:  # plain, not quoted, as PyYAML reads it
        return YAML11_BOOLS[node]
    for kind in PLAIN:
        if isinstance(node, kind):
            return kind(node)
    if isinstance(node, datetime.date):  # YAML reads 2026-01-01 as a date; keep the text
        return node.isoformat()
    raise _error(parsed, doc, path, f"unsupported value of type {type(node).__name__}")
