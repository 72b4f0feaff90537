"""The inventory (fleet.yaml): which hosts exist and how to reach them."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from fnmatch import fnmatchcase
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, StringConstraints

from rollout.errors import ConfigError, Location, UserError

from .durations import Seconds
from .yamlfile import check_unique_names, load_yaml, to_plain, validate

HostKeyPolicy = Literal["strict", "accept-new"]
NAME_PATTERN = r"^[A-Za-z0-9._-]+$"
Name = Annotated[str, StringConstraints(pattern=NAME_PATTERN)]


def _not_bool(value: Any) -> Any:
    if isinstance(value, bool):
        raise ValueError(f"must be a port number, not {str(value).lower()}")
    return value


Port = Annotated[int, BeforeValidator(_not_bool)]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, coerce_numbers_to_str=True)


class InventoryDefaults(_Strict):
    """Fleet-wide defaults; every one can be overridden per host."""

    user: str = Field(default="root", description="SSH user.")
    port: Port = Field(default=22, ge=1, le=65535, description="SSH port.")
    key_file: str | None = Field(
        default=None,
        description="Private key file. Relative paths are relative to the inventory file; "
        "`~` is expanded. null: the SSH agent and default keys.",
    )
    known_hosts: str = Field(
        default="~/.ssh/known_hosts",
        description="known_hosts file that host keys are checked against "
        "(relative to the inventory file; `~` expanded).",
    )
    host_key_policy: HostKeyPolicy = Field(
        default="strict",
        description="`strict`: refuse unknown host keys. `accept-new`: record an unknown key "
        "on first contact. A key that changed is always refused.",
    )
    connect_timeout: Seconds = Field(
        default=10, gt=0, description="Seconds to wait for an SSH connection."
    )
    vars: dict[str, Any] = Field(
        default_factory=dict, description="Template variables for every host."
    )


class HostEntry(_Strict):
    """One host of the fleet. Unset connection keys fall back to `defaults`."""

    name: str = Field(pattern=NAME_PATTERN, description="Unique host name ([A-Za-z0-9._-]+).")
    address: str = Field(min_length=1, description="Address or DNS name to connect to.")
    port: Port | None = Field(default=None, ge=1, le=65535, description="SSH port.")
    user: str | None = Field(default=None, description="SSH user.")
    key_file: str | None = Field(default=None, description="Private key file.")
    known_hosts: str | None = Field(default=None, description="known_hosts file.")
    host_key_policy: HostKeyPolicy | None = Field(default=None, description="Host key policy.")
    connect_timeout: Seconds | None = Field(
        default=None, gt=0, description="Connection timeout, seconds."
    )
    groups: list[Name] = Field(
        default_factory=list, description="Groups this host belongs to (for --limit)."
    )
    vars: dict[str, Any] = Field(
        default_factory=dict, description="Template variables, merged over `defaults.vars`."
    )


class InventoryFile(_Strict):
    """An inventory file (fleet.yaml)."""

    defaults: InventoryDefaults = Field(
        default_factory=InventoryDefaults, description="Fleet-wide defaults."
    )
    hosts: list[HostEntry] = Field(min_length=1, description="The hosts of the fleet.")
    playbook: str | None = Field(
        default=None,
        description="Playbook used when --playbook is not given (relative to the inventory "
        "file; `~` expanded). The lab's inventory names the lab playbook; null: "
        "playbooks/rollout.yaml, else the built-in real cuzk playbook.",
    )


@dataclass(frozen=True)
class Host:
    """A host with every setting resolved: absolute paths, defaults applied, vars merged."""

    name: str
    address: str
    port: int
    user: str
    key_file: Path | None
    known_hosts: Path
    host_key_policy: HostKeyPolicy
    connect_timeout: float
    groups: tuple[str, ...] = ()
    vars: Mapping[str, Any] = field(default_factory=dict, hash=False, compare=False)

    def as_context(self) -> dict[str, Any]:
        """The `host` variable of runtime templates."""
        return {
            "name": self.name,
            "address": self.address,
            "port": self.port,
            "user": self.user,
            "groups": list(self.groups),
            "vars": dict(self.vars),
        }


@dataclass(frozen=True)
class Inventory:
    path: Path
    hosts: list[Host]
    playbook: Path | None = None

    @property
    def groups(self) -> dict[str, list[Host]]:
        out: dict[str, list[Host]] = {}
        for host in self.hosts:
            for group in host.groups:
                out.setdefault(group, []).append(host)
        return out

    def get(self, name: str) -> Host:
        for host in self.hosts:
            if host.name == name:
                return host
        raise UserError(f"unknown host {name!r}")

    def select(self, limit: str | None) -> list[Host]:
        """Hosts matching `limit`: comma-separated host names, group names or globs
        (fnmatch, against both). None, "" or "all" selects every host. Inventory order."""
        patterns = [p.strip() for p in (limit or "").split(",") if p.strip()]
        if not patterns or "all" in patterns:
            return list(self.hosts)
        chosen: set[str] = set()
        for pattern in patterns:
            matched = [h.name for h in self.hosts if _matches(h, pattern)]
            if not matched:
                raise UserError(
                    f"--limit {pattern!r} matches no host or group "
                    f"(hosts: {', '.join(h.name for h in self.hosts)}; "
                    f"groups: {', '.join(sorted(self.groups)) or 'none'})"
                )
            chosen.update(matched)
        return [h for h in self.hosts if h.name in chosen]


def _matches(host: Host, pattern: str) -> bool:
    return any(fnmatchcase(name, pattern) for name in (host.name, *host.groups))


YAML_SUFFIXES = (".yaml", ".yml")


def load_inventory(path: Path | str) -> Inventory:
    """Read, validate and resolve an inventory file: fleet.yaml, or an Ansible inventory
    (INI when the name does not end in .yaml/.yml, as Ansible decides). Errors raise
    ConfigError naming the file, line and key."""
    from .ansible import host_entries
    from .ansible_ini import read_ini
    from .ansible_yaml import looks_like_ansible, parse_yaml

    file = Path(path)
    if file.suffix not in YAML_SUFFIXES:
        return _from_entries(file, host_entries(read_ini(file)))
    doc = load_yaml(file, "inventory")
    if looks_like_ansible(doc.root):
        return _from_entries(file, host_entries(parse_yaml(doc)))
    spec = validate(InventoryFile, to_plain(doc.root), doc)
    check_unique_names(doc, "hosts", [entry.name for entry in spec.hosts], "host")
    hosts = [_resolve(entry, spec.defaults, doc.base_dir) for entry in spec.hosts]
    for index, (entry, host) in enumerate(zip(spec.hosts, hosts, strict=True)):
        if host.known_hosts.is_dir():
            key = ("hosts", index) if entry.known_hosts else ("defaults",)
            where = doc.location((*key, "known_hosts"))
            raise ConfigError(f"known_hosts {host.known_hosts} is a folder, not a file", where)
    playbook = None if spec.playbook is None else _local_path(spec.playbook, doc.base_dir)
    return Inventory(doc.path, hosts, playbook)


def _from_entries(file: Path, entries: list[HostEntry]) -> Inventory:
    if not entries:
        raise ConfigError("the inventory has no hosts", Location(str(file)))
    base = file.absolute().parent
    hosts = [_resolve(entry, InventoryDefaults(), base) for entry in entries]
    for host in hosts:
        if host.known_hosts.is_dir():
            raise ConfigError(f"known_hosts {host.known_hosts} is a folder, not a file",
                              Location(str(file), None, f"{host.name}: rollout_known_hosts"))
    return Inventory(file, hosts)


def _resolve(entry: HostEntry, defaults: InventoryDefaults, base_dir: Path) -> Host:
    def pick(key: str) -> Any:
        value = getattr(entry, key)
        return getattr(defaults, key) if value is None else value

    key_file = pick("key_file")
    return Host(
        name=entry.name,
        address=entry.address,
        port=pick("port"),
        user=pick("user"),
        key_file=None if key_file is None else _local_path(key_file, base_dir),
        known_hosts=_local_path(pick("known_hosts"), base_dir),
        host_key_policy=pick("host_key_policy"),
        connect_timeout=pick("connect_timeout"),
        groups=tuple(entry.groups),
        vars={**defaults.vars, **entry.vars},
    )


def _local_path(value: str, base: Path) -> Path:
    path = Path(value).expanduser()
    return path if path.is_absolute() else Path(os.path.normpath(base / path))
