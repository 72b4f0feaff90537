"""Ansible inventories (INI and YAML) read as rollout inventories.

What is read: hosts, groups, `children` groups, host vars, group vars and `all` vars, and
the `group_vars/` and `host_vars/` folders beside the inventory file (ansible_vars.py),
merged the way Ansible merges them (lowest first): the inventory's `all` vars, its groups'
vars (shallowest first, then `ansible_group_priority`, then by name), group_vars/all,
group_vars/GROUP in the same order, the host's inventory vars, host_vars/HOST.

Connection vars: ansible_host, ansible_port, ansible_user, ansible_ssh_private_key_file
(and their old ansible_ssh_* names), and a ProxyJump in ansible_ssh_common_args or
ansible_ssh_extra_args (`-J HOST`, `-o ProxyJump=HOST`); rollout's own SSH settings come
from rollout_known_hosts, rollout_host_key_policy and rollout_connect_timeout. Every other
var is a template var, as it is in fleet.yaml. A relative key path is read from the working
directory, as Ansible reads it (`key_path`). An ansible_* name that neither rollout nor
Ansible knows is warned about with a did-you-mean (`ansible_prot`: ansible_port?).

Ignored (documented, kept as template vars, no effect on how rollout connects):
IGNORED_VARS below. Refused (exit 2, naming the file, line and var): REFUSED_VARS below,
any other ssh option in ansible_ssh_common_args/extra_args, `ansible_become` when true,
host ranges (`web[01:10]`), inventory plugins and scripts, Vault-encrypted values, a
connection other than ssh, and anything Ansible itself would refuse (an undefined group
in `:vars` or `:children`, a cycle of children). Values are data: nothing is templated,
imported or run.
"""

from __future__ import annotations

import difflib
import os
import shlex
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from rollout.errors import ConfigError, Location

from .inventory_file import HostEntry

CONNECTION_VARS = {
    "address": ("ansible_host", "ansible_ssh_host"),
    "port": ("ansible_port", "ansible_ssh_port"),
    "user": ("ansible_user", "ansible_ssh_user"),
    "key_file": ("ansible_ssh_private_key_file", "ansible_private_key_file"),
    "known_hosts": ("rollout_known_hosts",),
    "host_key_policy": ("rollout_host_key_policy",),
    "connect_timeout": ("rollout_connect_timeout",),
}
SSH_ARGS_VARS = ("ansible_ssh_common_args", "ansible_ssh_extra_args")
SSH_CONNECTIONS = {"ssh", "paramiko", "smart"}
NOT_TEMPLATE_VARS = {"ansible_connection", *SSH_ARGS_VARS} | {
    n for ns in CONNECTION_VARS.values() for n in ns
}
PASSWORDS = (
    "password logins are not supported: rollout logs in with keys (the SSH agent or "
    "ansible_ssh_private_key_file)"
)
REFUSED_VARS = {
    "ansible_password": PASSWORDS,
    "ansible_ssh_pass": PASSWORDS,
    "ansible_ssh_password": PASSWORDS,
    "ansible_ssh_executable": "rollout's SSH client is built in (paramiko); it runs no ssh "
    "executable",
}
BECOME = "ansible_become"
BECOME_WHY = (
    "become (sudo/su) is not supported: rollout runs commands as ansible_user; "
    "connect as the user that runs the daemon"
)
IGNORED_VARS = {
    "ansible_python_interpreter": "host scripts run with the host's python3",
    "ansible_shell_type": "rollout runs no remote shell of Ansible's",
    "ansible_shell_executable": "rollout runs no remote shell of Ansible's",
    "ansible_pipelining": "rollout keeps one connection per host",
    "ansible_ssh_pipelining": "rollout keeps one connection per host",
    "ansible_sftp_extra_args": "files travel over rollout's own SSH connection",
    "ansible_scp_extra_args": "files travel over rollout's own SSH connection",
    "ansible_ssh_transfer_method": "files travel over rollout's own SSH connection",
    "ansible_become_user": "used only with ansible_become, which is refused when true",
    "ansible_become_method": "used only with ansible_become, which is refused when true",
    "ansible_become_password": "used only with ansible_become, which is refused when true",
    "ansible_become_pass": "used only with ansible_become, which is refused when true",
    "ansible_become_exe": "used only with ansible_become, which is refused when true",
    "ansible_become_flags": "used only with ansible_become, which is refused when true",
}
ROLLOUT_READS = sorted(n for n in {*NOT_TEMPLATE_VARS, BECOME} if n.startswith("ansible_"))
"""The ansible_* names rollout acts on: the did-you-mean candidates for an unknown one."""
ANSIBLE_FAMILIES = ("ansible_become", "ansible_su_", "ansible_sudo_", "ansible_runas_",
                    "ansible_winrm_", "ansible_psrp_", "ansible_paramiko_", "ansible_local",
                    "ansible_facts", "ansible_play_", "ansible_role_")  # fmt: skip
ANSIBLE_OTHERS = frozenset({
    "ansible_admin_users", "ansible_async_dir", "ansible_collection_name",
    "ansible_common_remote_group", "ansible_config_file", "ansible_connection_user",
    "ansible_control_path", "ansible_control_path_dir", "ansible_delegated_vars",
    "ansible_dependent_role_names", "ansible_deprecation_warnings",
    "ansible_docker_extra_args", "ansible_host_key_checking",
    "ansible_interpreter_python_fallback", "ansible_module_compression", "ansible_network_os",
    "ansible_no_target_syslog", "ansible_playbook_python", "ansible_private_key",
    "ansible_private_key_passphrase", "ansible_python_module_rlimit_nofile",
    "ansible_remote_tmp", "ansible_rsync_path", "ansible_scp_executable",
    "ansible_sftp_batch_mode", "ansible_sftp_executable",
    "ansible_shell_allow_world_readable_temp", "ansible_ssh_args",
    "ansible_ssh_host_key_checking", "ansible_ssh_password_mechanism",
    "ansible_ssh_pkcs11_provider", "ansible_ssh_private_key",
    "ansible_ssh_private_key_passphrase", "ansible_ssh_retries", "ansible_ssh_timeout",
    "ansible_ssh_use_tty", "ansible_ssh_verbosity", "ansible_sshpass_prompt",
    "ansible_system_tmpdirs", "ansible_target_log_info", "ansible_timeout",
    "ansible_win_async_startup_timeout",
})
"""ansible-core 2.19's other var names (its plugins' docs and magic vars): no effect on
rollout, never a typo."""
TRUE_WORDS = {"y", "yes", "on", "1", "true", "t"}
DEFAULT_PRIORITY = 1  # Ansible's Group.priority


@dataclass(frozen=True)
class Value:
    """A var's value and where it was set: `file` None is the inventory file itself."""

    value: Any
    line: int | None
    file: Path | None = None


@dataclass
class Group:
    name: str
    line: int | None
    vars: dict[str, Value] = field(default_factory=dict)
    children: list[str] = field(default_factory=list)
    hosts: list[str] = field(default_factory=list)
    priority: int = DEFAULT_PRIORITY


@dataclass
class HostDecl:
    name: str
    line: int | None
    vars: dict[str, Value] = field(default_factory=dict)


@dataclass
class Parsed:
    """What an INI or YAML inventory said, before Ansible's merge rules; `group_files` and
    `host_files` hold what group_vars/ and host_vars/ say (ansible_vars.py fills them)."""

    file: Path
    groups: dict[str, Group] = field(default_factory=dict)
    hosts: dict[str, HostDecl] = field(default_factory=dict)
    group_files: dict[str, dict[str, Value]] = field(default_factory=dict)
    host_files: dict[str, dict[str, Value]] = field(default_factory=dict)
    unreadable: dict[str, str] = field(default_factory=dict)
    """`group_vars/NAME` or `host_vars/NAME` (by its folder and name) that could not be read:
    why. Each such source fails only the hosts it gives vars to."""

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

    def set_group_var(self, group: str, key: str, value: Value) -> None:
        """As Ansible's Group.set_variable: `ansible_group_priority` is the group's priority
        (an integer), not a var."""
        if key != "ansible_group_priority":
            self.groups[group].vars[key] = value
            return
        try:
            self.groups[group].priority = int(value.value)
        except (TypeError, ValueError):
            raise self.error(f"ansible_group_priority {value.value!r} is not an integer",
                             value.line, key) from None  # fmt: skip

    def error(self, message: str, line: int | None, key: str | None = None) -> ConfigError:
        return ConfigError(message, Location(str(self.file), line, key))

    def where(self, value: Value, key: str) -> Location:
        return Location(str(value.file or self.file), value.line, key)


def split_port(parsed: Parsed, token: str, line: int | None) -> tuple[str, int | None]:
    """`name:port` as Ansible reads a host pattern; an IPv6 address (more than one `:`)
    has no port suffix here."""
    if token.count(":") != 1:
        return token, None
    name, port = token.split(":")
    if not port.isdigit():
        raise parsed.error(f"port {port!r} of host {name!r} is not a number", line, name)
    return name, int(port)


@dataclass(frozen=True)
class Merged:
    """One host as Ansible sees it: its groups (Ansible's order, without `all`) and its
    vars merged, each with where it was set."""

    name: str
    groups: list[str]
    vars: dict[str, Value]


def merge(parsed: Parsed) -> list[Merged]:
    """Every host's groups and merged vars, in the order hosts were declared."""
    depth = _depths(parsed)
    member_of = _memberships(parsed)
    out = []
    for name, decl in parsed.hosts.items():
        groups = sorted(member_of[name] - {"all"},
                        key=lambda g: (depth[g], parsed.groups[g].priority, g))  # fmt: skip
        merged: dict[str, Value] = dict(parsed.groups["all"].vars)
        for group in groups:
            merged.update(parsed.groups[group].vars)
        for group in ("all", *groups):
            merged.update(parsed.group_files.get(group, {}))
        merged.update(decl.vars)
        merged.update(parsed.host_files.get(name, {}))
        out.append(Merged(name, groups, merged))
    return out


def host_entries(parsed: Parsed) -> tuple[list[HostEntry], dict[str, str]]:
    """One validated fleet.yaml-style entry per host, in the order hosts were declared; and
    the hosts refused because a vars file of theirs could not be read (host -> why)."""
    entries, refused = [], {}
    for host in merge(parsed):
        sources = [f"host_vars/{host.name}", *(f"group_vars/{g}" for g in ("all", *host.groups))]
        why = next((parsed.unreadable[s] for s in sources if s in parsed.unreadable), None)
        if why is None:
            entries.append(_entry(parsed, host))
        else:
            refused[host.name] = why
    return entries, refused


def _entry(parsed: Parsed, host: Merged) -> HostEntry:
    merged = host.vars
    _refuse(parsed, merged)
    fields: dict[str, Any] = {"name": host.name, "address": host.name,
                              "groups": [g for g in host.groups if g != "ungrouped"]}  # fmt: skip
    decl_line = parsed.hosts[host.name].line
    origin: dict[str, tuple[str, Value | None]] = {"name": ("host", None)}
    for key, names in CONNECTION_VARS.items():
        var = next((n for n in names if n in merged), None)
        if var is not None:
            found = merged[var]
            fields[key] = key_path(parsed, found, var) if key == "key_file" else found.value
            origin[key] = (var, found)
    jump = proxy_jump(parsed, merged)
    if jump is not None:
        fields["proxy_jump"], origin["proxy_jump"] = jump[0], (jump[1], merged[jump[1]])
    fields["vars"] = {k: v.value for k, v in merged.items() if k not in NOT_TEMPLATE_VARS}
    try:
        return HostEntry.model_validate(fields)
    except ValidationError as exc:
        err = exc.errors(include_url=False)[0]
        key = str(err["loc"][0]) if err["loc"] else "host"
        var, value = origin.get(key, ("host", None))
        message = str(err["msg"]).removeprefix("Value error, ")
        if value is None:
            raise parsed.error(message, decl_line, host.name) from None
        raise ConfigError(message, parsed.where(value, f"{host.name}: {var}")) from None


def _refuse(parsed: Parsed, merged: dict[str, Value]) -> None:
    """The connection vars rollout cannot honour, refused by name (never dropped)."""
    connection = merged.get("ansible_connection")
    if connection is not None and str(connection.value) not in SSH_CONNECTIONS:
        raise ConfigError(f"ansible_connection {connection.value!r} is not supported; "
                          "rollout reaches hosts over SSH",
                          parsed.where(connection, "ansible_connection"))  # fmt: skip
    for var, why in REFUSED_VARS.items():
        if var in merged:
            raise ConfigError(f"{var}: {why}", parsed.where(merged[var], var))
    become = merged.get(BECOME)
    if become is not None and str(become.value).lower() in TRUE_WORDS:
        raise ConfigError(f"{BECOME}: {BECOME_WHY}", parsed.where(become, BECOME))


def proxy_jump(parsed: Parsed, merged: dict[str, Value]) -> tuple[str, str] | None:
    """The ProxyJump that ansible_ssh_common_args / ansible_ssh_extra_args give, and the var
    that gave it; any other ssh option in them is refused by name."""
    found: tuple[str, str] | None = None
    for var in SSH_ARGS_VARS:
        if var not in merged or merged[var].value in (None, ""):
            continue
        jump = _jump_in(parsed, merged[var], var)
        if jump is not None and found is not None and jump != found[0]:
            raise ConfigError(f"a second ProxyJump {jump!r} (after {found[0]!r} in {found[1]})",
                              parsed.where(merged[var], var))  # fmt: skip
        found = found or (None if jump is None else (jump, var))
    return found


def _jump_in(parsed: Parsed, value: Value, var: str) -> str | None:
    where = parsed.where(value, var)
    try:
        words = shlex.split(str(value.value))
    except ValueError as exc:
        raise ConfigError(f"cannot split the ssh arguments: {exc}", where) from None
    jump = None
    while words:
        word = words.pop(0)
        if word in ("-J", "-o") and not words:
            raise ConfigError(f"{word} without a value", where)
        if word == "-J" or (word.startswith("-J") and len(word) > 2):
            jump = words.pop(0) if word == "-J" else word[2:]
            continue
        option = (words.pop(0) if word == "-o" else word[2:]) if word.startswith("-o") else None
        if option is None:
            raise ConfigError(f"ssh argument {word!r} is not supported (rollout reads only "
                              "a ProxyJump here: -J HOST or -o ProxyJump=HOST)", where)  # fmt: skip
        name, _, rest = option.replace("=", " ", 1).partition(" ")
        if name.lower() != "proxyjump":
            raise ConfigError(f"ssh option {name!r} is not supported (rollout reads only "
                              "ProxyJump here; ProxyCommand: use ProxyJump)", where)  # fmt: skip
        jump = rest.strip() or (words.pop(0) if words else "")
        if not jump:
            raise ConfigError("ProxyJump without a value", where)
    return jump


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


def finish(parsed: Parsed) -> Parsed:
    """`all` and `ungrouped` exist; every group without a parent is a child of `all`."""
    parsed.group("all", None)
    parsed.group("ungrouped", None)
    children = {c for g in parsed.groups.values() for c in g.children}
    for name in parsed.groups:
        if name != "all" and name not in children:
            parsed.groups["all"].children.append(name)
    return parsed


def key_path(parsed: Parsed, value: Value, var: str) -> Any:
    """A relative key path as Ansible reads it: from the working directory (it hands the
    path to ssh as is). One missing there but found beside the inventory, where rollout
    looked before, is still used, with a warning naming both."""
    text = value.value
    if not isinstance(text, str) or not text or text.startswith(("/", "~")):
        return text
    here = os.path.normpath(Path.cwd() / text)
    beside = os.path.normpath(parsed.file.absolute().parent / text)
    if here == beside or os.path.exists(here) or not os.path.exists(beside):
        return here
    warn(f"{parsed.where(value, var)}: {text!r} is read beside the inventory ({beside}), as "
         f"rollout did before; Ansible reads it from the working directory ({here}, which "
         "does not exist): write an absolute path")  # fmt: skip
    return beside


def ansible_var_warnings(parsed: Parsed) -> tuple[list[str], list[str]]:
    """One warning per ansible_* name that neither rollout nor Ansible knows (a typo: it
    would be a template var), with a did-you-mean; and one note per name Ansible knows that
    rollout does not read. Each names where it is first set, and how many more places."""
    places: dict[str, list[Location]] = {}
    for key, value in _every_var(parsed):
        if key.startswith("ansible_"):
            places.setdefault(key, []).append(parsed.where(value, key))
    warnings, notes = [], []
    for key, where in places.items():
        others = len(where) - 1
        more = f" (and {others} more place{'s' if others > 1 else ''})" if others else ""
        if key in ROLLOUT_READS or key in REFUSED_VARS or key in IGNORED_VARS \
                or key.endswith("_interpreter"):  # fmt: skip
            continue
        if key in ANSIBLE_OTHERS or key.startswith(ANSIBLE_FAMILIES):
            notes.append(f"{where[0]}{more}: ignored (an Ansible var rollout does not read)")
            continue
        warnings.append(f"{where[0]}{more}: unknown Ansible var, kept as a template var"
                        f"{_did_you_mean(key)}")  # fmt: skip
    return warnings, notes


def _did_you_mean(key: str) -> str:
    tails = {name.removeprefix("ansible_"): name for name in ROLLOUT_READS}
    close = difflib.get_close_matches(key.removeprefix("ansible_"), list(tails), n=1)
    return f"; did you mean {tails[close[0]]}?" if close else ""


def _every_var(parsed: Parsed) -> list[tuple[str, Value]]:
    """Every var as written, in the inventory and its vars files."""
    sources = [*(g.vars for g in parsed.groups.values()), *(h.vars for h in parsed.hosts.values()),
               *parsed.group_files.values(), *parsed.host_files.values()]  # fmt: skip
    return [(key, value) for found in sources for key, value in found.items()]


_warned: set[str] = set()  # each warning is told once per process


def warn(message: str) -> None:
    if message not in _warned:
        _warned.add(message)
        print(f"warning: {message}", file=sys.stderr)
