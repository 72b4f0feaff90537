"""The inventory file's schema (fleet.yaml): the fleet-wide defaults and one entry per host,
each key declared once with its type, default and help. Loading and resolving an
inventory (fleet.yaml or Ansible's) is rollout.config.inventory; an Ansible inventory is
read into the same HostEntry values (rollout.config.ansible)."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    StringConstraints,
)

from .durations import Seconds
from .sshconfig import check_address, check_proxy_jump, check_user
from .vastai import VastaiSource

HostKeyPolicy = Literal["strict", "accept-new"]
NAME_PATTERN = r"^[A-Za-z0-9._-]+$"
Name = Annotated[str, StringConstraints(pattern=NAME_PATTERN)]


def _not_bool(value: Any) -> Any:
    if isinstance(value, bool):
        raise ValueError(f"must be a port number, not {str(value).lower()}")
    return value


Port = Annotated[int, BeforeValidator(_not_bool)]
ProxyJump = Annotated[str, AfterValidator(check_proxy_jump)]
Address = Annotated[str, AfterValidator(check_address)]
User = Annotated[str, AfterValidator(check_user)]
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

    user: User = Field(default="root", description="SSH user.")
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
    address: Address = Field(description="Address or DNS name to connect to.")
    port: Port | None = Field(default=None, ge=1, le=65535, description="SSH port.")
    user: User | None = Field(default=None, description="SSH user.")
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
