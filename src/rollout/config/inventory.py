"""The inventory (fleet.yaml): which hosts exist and how to reach them."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import paramiko
from pydantic import ValidationError

from rollout.errors import ConfigError, Location, UserError

from .ansible_detect import YAML_SUFFIXES, looks_like_ansible
from .inventory_file import HostEntry, HostKeyPolicy, InventoryDefaults, InventoryFile
from .limit import Universe
from .limit import select as limit_select
from .sshconfig import (
    JumpHost,
    SshConfigFile,
    SshSettings,
    jump_hosts,
    parse_proxy_jump,
)
from .vastai import VastaiSource, parse_ref
from .vastai import load_fleet as load_vast_fleet
from .yamlfile import YamlDoc, check_unique_names, load_yaml, to_plain, validate


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
    proxy_jump: tuple[JumpHost, ...] = ()  # connected through, first hop first

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
    skipped: tuple[str, ...] = ()  # hosts a source listed but left out, each with why
    refused: Mapping[str, str] = field(default_factory=dict)
    """Hosts whose own source is hostile or unreadable (a host_vars file, a vast.ai row):
    each fails alone with why, the rest of the fleet goes on."""

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
        if name in self.refused:
            raise UserError(f"host {name} is refused: {self.refused[name]}")
        raise UserError(f"unknown host {name!r}")

    def universe(self) -> Universe:
        """What --limit picks from: the hosts, then the refused ones (matched by name only:
        their groups are unknown), and each group's hosts (`all` and `ungrouped` too)."""
        names = [h.name for h in self.hosts]
        groups: dict[str, list[str]] = {"all": [*names, *self.refused],
                                        "ungrouped": [h.name for h in self.hosts if not h.groups]}
        for name, members in self.groups.items():
            groups.setdefault(name, []).extend(h.name for h in members)
        return Universe([*names, *self.refused], groups)

    def refused_in(self, limit: str | None) -> dict[str, str]:
        """The refused hosts that `limit` picks (limit.py); all of them when it is None."""
        chosen = set(limit_select(self.universe(), limit))
        return {name: why for name, why in self.refused.items() if name in chosen}

    def select(self, limit: str | None) -> list[Host]:
        """Hosts matching `limit`, as Ansible's --limit reads it (limit.py); None or ""
        selects every host. Inventory order. UserError when it picks no host at all."""
        chosen = set(limit_select(self.universe(), limit))
        if not chosen:
            raise UserError(f"--limit {limit!r} leaves no host (hosts: "
                            f"{', '.join(h.name for h in self.hosts)})")  # fmt: skip
        return [h for h in self.hosts if h.name in chosen]


def load_inventory(path: Path | str) -> Inventory:
    """Read, validate and resolve an inventory file: fleet.yaml, or an Ansible inventory
    (INI when the name does not end in .yaml/.yml, as Ansible decides, with the group_vars/
    and host_vars/ folders beside it). Errors raise
    ConfigError naming the file, line and key."""
    if isinstance(path, str) and path.startswith("vastai:"):
        return _from_vastai(path)
    file = Path(path)
    if file.suffix not in YAML_SUFFIXES:
        return _from_ansible(file, None)
    doc = load_yaml(file, "inventory")
    if looks_like_ansible(doc.root):
        return _from_ansible(file, doc)
    spec = validate(InventoryFile, to_plain(doc.root), doc)
    check_unique_names(doc, "hosts", [entry.name for entry in spec.hosts], "host")
    ssh = _ssh_config(spec.defaults, doc.base_dir, doc.location(("defaults", "ssh_config")))
    hosts = [_resolve(entry, spec.defaults, doc.base_dir, ssh) for entry in spec.hosts]
    for index, (entry, host) in enumerate(zip(spec.hosts, hosts, strict=True)):
        if host.known_hosts.is_dir():
            key = ("hosts", index) if entry.known_hosts else ("defaults",)
            where = doc.location((*key, "known_hosts"))
            raise ConfigError(f"known_hosts {host.known_hosts} is a folder, not a file", where)
    playbook = None if spec.playbook is None else _local_path(spec.playbook, doc.base_dir)
    if spec.vastai is None and not hosts:
        raise ConfigError("the inventory has no hosts (nor `vastai`)", doc.location(("hosts",)))
    inventory = Inventory(doc.path, hosts, playbook)
    if spec.vastai is None:
        return inventory
    where = doc.location(("vastai", "label"))
    return _vast_hosts(inventory, spec.vastai, where, spec.defaults, doc.base_dir, ssh)


def _from_ansible(file: Path, doc: YamlDoc | None) -> Inventory:
    """An Ansible inventory: INI (`doc` None) or YAML, with its group_vars/ and host_vars/."""
    # for start-up time: the Ansible readers load only for an Ansible inventory
    from .ansible import ansible_var_warnings, host_entries, warn
    from .ansible_ini import read_ini
    from .ansible_vars import with_vars_dirs
    from .ansible_yaml import parse_yaml

    parsed = read_ini(file) if doc is None else parse_yaml(doc)
    parsed = with_vars_dirs(parsed)
    for warning in ansible_var_warnings(parsed)[0]:
        warn(warning)
    entries, refused = host_entries(parsed)
    if not entries and refused:
        name, why = next(iter(refused.items()))
        raise ConfigError(f"no host left: {name} is refused: {why}", Location(str(file)))
    return replace(_from_entries(file, entries), refused=refused)


def _from_vastai(ref: str) -> Inventory:
    """`--hosts vastai:LABEL`: the instances, with rollout's defaults."""
    where, defaults, base = Location(ref), InventoryDefaults(), Path.cwd()
    ssh = _ssh_config(defaults, base, where)
    return _vast_hosts(Inventory(Path(ref), []), parse_ref(ref), where, defaults, base, ssh)


def _vast_hosts(inventory: Inventory, source: VastaiSource, where: Location,
                defaults: InventoryDefaults, base_dir: Path, ssh: SshConfigFile) -> Inventory:
    """`inventory` with the instances of `source` added: the hosts, the instances skipped
    (not running), and those refused (hostile rows, an address outside the grammar)."""
    fleet = load_vast_fleet(source, where)
    entries, refused = [], dict(fleet.refused)
    for h in fleet.hosts:
        try:
            entries.append(HostEntry(name=h.name, address=h.address, port=h.port,
                                     groups=list(h.groups), vars=dict(h.vars)))
        except ValidationError as e:  # an address or port outside the grammar: that host only
            why = str(e.errors(include_url=False)[0]["msg"]).removeprefix("Value error, ")
            refused[h.name] = f"vast.ai instance: {why}"
    hosts = [_resolve(entry, defaults, base_dir, ssh) for entry in entries]
    if hosts and hosts[0].known_hosts.is_dir():
        raise ConfigError(f"known_hosts {hosts[0].known_hosts} is a folder, not a file", where)
    clash = {h.name for h in inventory.hosts} & {*(h.name for h in hosts), *refused}
    if clash:
        raise ConfigError(f"vast.ai instances named like hosts: {', '.join(sorted(clash))}", where)
    return replace(inventory, hosts=inventory.hosts + hosts,
                   skipped=(*inventory.skipped, *fleet.skipped),
                   refused={**inventory.refused, **refused})


def _from_entries(file: Path, entries: list[HostEntry]) -> Inventory:
    if not entries:
        raise ConfigError("the inventory has no hosts", Location(str(file)))
    base = file.absolute().parent
    ssh = _ssh_config(InventoryDefaults(), base, Location(str(file)))
    hosts = [_resolve(entry, InventoryDefaults(), base, ssh) for entry in entries]
    for host in hosts:
        if host.known_hosts.is_dir():
            raise ConfigError(f"known_hosts {host.known_hosts} is a folder, not a file",
                              Location(str(file), None, f"{host.name}: rollout_known_hosts"))
    return Inventory(file, hosts)


def _ssh_config(defaults: InventoryDefaults, base_dir: Path, where: Location) -> SshConfigFile:
    """The ssh_config file the inventory names; one it writes must exist."""
    if defaults.ssh_config is None:
        return SshConfigFile(None)
    path = _local_path(defaults.ssh_config, base_dir)
    if "ssh_config" in defaults.model_fields_set and not path.is_file():
        raise ConfigError(f"ssh_config {path} is not a file", where)
    try:
        return SshConfigFile(path)
    except (OSError, ValueError, paramiko.ConfigParseError) as e:
        raise ConfigError(f"cannot read ssh_config {path}: {e}", where) from e


def _resolve(entry: HostEntry, defaults: InventoryDefaults, base_dir: Path,
             ssh: SshConfigFile) -> Host:
    """The host's settings, highest first: its own, `defaults` the file writes,
    ssh_config's for its address, rollout's defaults."""
    found = _lookup(ssh, entry.name, entry.address)

    def pick(key: str, from_ssh: Any = None) -> Any:
        value = getattr(entry, key)
        if value is not None:
            return value
        if key in defaults.model_fields_set or from_ssh is None:
            return getattr(defaults, key)
        return from_ssh

    key_file, user = pick("key_file", found.identity_file), pick("user", found.user)
    jump = pick("proxy_jump", found.proxy_jump)
    try:
        hops = jump_hosts(parse_proxy_jump(jump), ssh, user) if jump else ()
    except ValueError as e:
        raise ConfigError(str(e), Location(str(ssh.path), None, entry.name)) from e
    return Host(
        name=entry.name,
        address=found.hostname,
        port=pick("port", found.port),
        user=user,
        key_file=None if key_file is None else _local_path(str(key_file), base_dir),
        known_hosts=_local_path(pick("known_hosts"), base_dir),
        host_key_policy=pick("host_key_policy"),
        connect_timeout=pick("connect_timeout"),
        groups=tuple(entry.groups),
        vars={**defaults.vars, **entry.vars},
        proxy_jump=hops,
    )


def _lookup(ssh: SshConfigFile, name: str, address: str) -> SshSettings:
    try:
        return ssh.lookup(address)
    except ValueError as e:
        raise ConfigError(str(e), Location(str(ssh.path), None, name)) from e


def _local_path(value: str, base: Path) -> Path:
    path = Path(value).expanduser()
    return path if path.is_absolute() else Path(os.path.normpath(base / path))
