"""The inventory (fleet.yaml): which hosts exist and how to reach them."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from fnmatch import fnmatchcase
from pathlib import Path
from typing import Annotated, Any, Literal

import paramiko
from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    StringConstraints,
)

from rollout.errors import ConfigError, Location, UserError

from .durations import Seconds
from .sshconfig import (
    JumpHost,
    SshConfigFile,
    SshSettings,
    check_proxy_jump,
    jump_hosts,
    parse_proxy_jump,
)
from .vastai import VastaiSource, parse_ref
from .vastai import load_fleet as load_vast_fleet
from .yamlfile import check_unique_names, load_yaml, to_plain, validate

HostKeyPolicy = Literal["strict", "accept-new"]
NAME_PATTERN = r"^[A-Za-z0-9._-]+$"
Name = Annotated[str, StringConstraints(pattern=NAME_PATTERN)]


def _not_bool(value: Any) -> Any:
    if isinstance(value, bool):
        raise ValueError(f"must be a port number, not {str(value).lower()}")
    return value


Port = Annotated[int, BeforeValidator(_not_bool)]
ProxyJump = Annotated[str, AfterValidator(check_proxy_jump)]
_PROXY_JUMP_HELP = (
    "Jump host(s) to reach this host through, as `ssh -J`: `[user@]host[:port]`, comma "
    "separated, first hop first; `none`: connect directly, whatever ssh_config says. A hop "
    "takes its user and port from ssh_config for its name, else the host's user and port 22; "
    "it logs in with the host's key (or the agent) and its host key is checked against the "
    "same known_hosts and host_key_policy. null: ssh_config's ProxyJump, if any."
)


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
    proxy_jump: ProxyJump | None = Field(default=None, description=_PROXY_JUMP_HELP)
    ssh_config: str | None = Field(
        default="~/.ssh/config",
        description="OpenSSH client config read for every host's address, as `ssh ADDRESS` "
        "reads it (Host aliases, Match, HostName, Port, User, IdentityFile, ProxyJump). A value "
        "the inventory writes (on the host, else in `defaults`) wins over ssh_config's; "
        "ssh_config's wins over rollout's defaults. Relative to the inventory file; `~` "
        "expanded; a missing default file is no error. null: read none.",
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
    proxy_jump: ProxyJump | None = Field(
        default=None, description="Jump host(s), `[user@]host[:port]`; `none`: direct."
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
    hosts: list[HostEntry] = Field(
        default_factory=list, description="The hosts of the fleet (none: `vastai` names them)."
    )
    vastai: VastaiSource | None = Field(
        default=None,
        description="Also the running instances of a vast.ai account whose label matches, read "
        "from its API at every load (docs/real-fleet.md); `--hosts vastai:LABEL` is the same "
        "with no file.",
    )
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
    (INI when the name does not end in .yaml/.yml, as Ansible decides, with the group_vars/
    and host_vars/ folders beside it). Errors raise
    ConfigError naming the file, line and key."""
    from .ansible import host_entries
    from .ansible_ini import read_ini
    from .ansible_vars import with_vars_dirs
    from .ansible_yaml import looks_like_ansible, parse_yaml

    if isinstance(path, str) and path.startswith("vastai:"):
        return _from_vastai(path)
    file = Path(path)
    if file.suffix not in YAML_SUFFIXES:
        return _from_entries(file, host_entries(with_vars_dirs(read_ini(file))))
    doc = load_yaml(file, "inventory")
    if looks_like_ansible(doc.root):
        return _from_entries(file, host_entries(with_vars_dirs(parse_yaml(doc))))
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
    if spec.vastai is None:
        return Inventory(doc.path, hosts, playbook)
    where = doc.location(("vastai", "label"))
    fleet = _vast_hosts(spec.vastai, where, spec.defaults, doc.base_dir, ssh)
    clash = {h.name for h in hosts} & {h.name for h in fleet[0]}
    if clash:
        raise ConfigError(f"vast.ai instances named like hosts: {', '.join(sorted(clash))}", where)
    return Inventory(doc.path, hosts + fleet[0], playbook, fleet[1])


def _from_vastai(ref: str) -> Inventory:
    """`--hosts vastai:LABEL`: the instances, with rollout's defaults."""
    where, defaults, base = Location(ref), InventoryDefaults(), Path.cwd()
    ssh = _ssh_config(defaults, base, where)
    hosts, skipped = _vast_hosts(parse_ref(ref), where, defaults, base, ssh)
    return Inventory(Path(ref), hosts, None, skipped)


def _vast_hosts(source: VastaiSource, where: Location, defaults: InventoryDefaults,
                base_dir: Path, ssh: SshConfigFile) -> tuple[list[Host], tuple[str, ...]]:
    fleet = load_vast_fleet(source, where)
    entries = [HostEntry(name=h.name, address=h.address, port=h.port, groups=list(h.groups),
                         vars=dict(h.vars)) for h in fleet.hosts]
    hosts = [_resolve(entry, defaults, base_dir, ssh) for entry in entries]
    if hosts and hosts[0].known_hosts.is_dir():
        raise ConfigError(f"known_hosts {hosts[0].known_hosts} is a folder, not a file", where)
    return hosts, tuple(fleet.skipped)


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
