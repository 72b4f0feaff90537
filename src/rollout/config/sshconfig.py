"""OpenSSH's client settings for one host: ProxyJump hops ("[user@]host[:port]", comma
separated) and ~/.ssh/config, read by paramiko's SSHConfig as fabric reads it.

Order, highest first: the inventory host's own key, the inventory's `defaults` when the
file writes the key, ssh_config's value for the host's address, rollout's default.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import paramiko

_USER = r"[A-Za-z0-9_][A-Za-z0-9._-]*"
_HOST = r"[A-Za-z0-9_][A-Za-z0-9._-]*|\[[0-9A-Fa-f:.]+\]"
_HOP = re.compile(rf"(?:(?P<user>{_USER})@)?(?P<host>{_HOST})(?::(?P<port>[0-9]{{1,5}}))?")
NO_JUMP = "none"  # OpenSSH's word for "no jump host", which overrides ssh_config's


@dataclass(frozen=True)
class Hop:
    """One jump host as written: user and port None where the hop names none."""

    address: str
    port: int | None = None
    user: str | None = None


@dataclass(frozen=True)
class JumpHost:
    """A jump host with every setting resolved: rollout connects here first."""

    address: str
    port: int
    user: str


def parse_proxy_jump(value: str) -> tuple[Hop, ...]:
    """`[user@]host[:port]` hops, comma separated, first hop first; `none`: no hop.
    ValueError for anything else (an option, a space, a URI, a port out of range)."""
    if value == NO_JUMP:
        return ()
    hops = []
    for word in value.split(","):
        match = _HOP.fullmatch(word)
        if match is None:
            raise ValueError(f"{word!r} is not [user@]host[:port] (ProxyJump)")
        port = None if match["port"] is None else int(match["port"])
        if port is not None and not 1 <= port <= 65535:
            raise ValueError(f"{word!r}: port {port} is not 1-65535")
        hops.append(Hop(match["host"].strip("[]"), port, match["user"]))
    return tuple(hops)


def check_proxy_jump(value: str | None) -> str | None:
    """The pydantic check of the `proxy_jump` option: the value, unchanged, once it parses."""
    if value is not None:
        parse_proxy_jump(value)
    return value


@dataclass(frozen=True)
class SshSettings:
    """What ssh_config says of one address (None where it says nothing)."""

    hostname: str
    port: int | None = None
    user: str | None = None
    identity_file: Path | None = None
    proxy_jump: str | None = None


class SshConfigFile:
    """One ssh_config file, parsed once; a missing file says nothing of any host."""

    def __init__(self, path: Path | None) -> None:
        self.path = path
        self._config = paramiko.SSHConfig()
        if path is not None and path.is_file():
            self._config = paramiko.SSHConfig.from_path(str(path))

    def lookup(self, address: str) -> SshSettings:
        """The settings `ssh ADDRESS` would take from this file. ValueError for a
        ProxyCommand (rollout connects through ProxyJump only) or a bad value."""
        try:
            found = self._config.lookup(address)
        except paramiko.SSHException as e:  # a Match that cannot be evaluated
            raise ValueError(f"{self.path}: {address!r}: {e}") from e
        if "proxycommand" in found:
            raise ValueError(f"{self.path}: ProxyCommand for {address!r} is not supported; "
                             "use ProxyJump, or the inventory's proxy_jump")
        raw: str | list[str] = found.get("identityfile") or []
        files = [raw] if isinstance(raw, str) else list(raw)
        jump = found.get("proxyjump")
        if jump is not None:
            check_proxy_jump(jump)
        return SshSettings(
            hostname=found.get("hostname", address),
            port=_port(found.get("port"), self.path),
            user=found.get("user"),
            identity_file=Path(files[0]).expanduser() if files else None,
            proxy_jump=jump,
        )


def _port(value: str | None, path: Path | None) -> int | None:
    if value is None:
        return None
    if not value.isdigit() or not 1 <= int(value) <= 65535:
        raise ValueError(f"{path}: Port {value!r} is not 1-65535")
    return int(value)


def jump_hosts(hops: tuple[Hop, ...], config: SshConfigFile, user: str) -> tuple[JumpHost, ...]:
    """Each hop resolved as `ssh -J` does: the hop's own user and port, else ssh_config's
    for its name, else port 22 and the target's `user`."""
    out = []
    for hop in hops:
        found = config.lookup(hop.address)
        out.append(JumpHost(found.hostname, hop.port or found.port or 22,
                            hop.user or found.user or user))
    return tuple(out)
