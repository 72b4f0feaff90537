"""OpenSSH's client settings for one host: ProxyJump hops ("[user@]host[:port]", comma
separated) and ~/.ssh/config, read by paramiko's SSHConfig as fabric reads it.

Order, highest first: the inventory host's own key, the inventory's `defaults` when the
file writes the key, ssh_config's value for the host's address, rollout's default.

The grammar of what reaches a connection, checked in one place (check_address, check_user)
wherever a host is made: an address is a DNS host name or an IP literal; a user is what
OpenSSH's ssh accepts as a remote user (valid_ruser), without whitespace.

Nothing read from an ssh_config runs a program. paramiko would run `Match exec` through a
shell, so paramiko never sees the file: rollout reads it (bounded, regular files only),
follows `Include` as OpenSSH does, makes each `Match exec` block one that never matches and
drops LocalCommand, PermitLocalCommand and KnownHostsCommand, each with a warning naming
the file and line; a ProxyCommand is refused for the host it applies to.
"""

from __future__ import annotations

import glob
import ipaddress
import re
import shlex
import sys
from dataclasses import dataclass
from pathlib import Path

import paramiko

from rollout.errors import ConfigError, Location
from rollout.readfile import read_text

NO_JUMP = "none"  # OpenSSH's word for "no jump host", which overrides ssh_config's
_LABEL = r"[A-Za-z0-9_-]+"
_DNS_NAME = re.compile(rf"(?!-){_LABEL}(?:\.{_LABEL})*\.?")
_SCOPE = re.compile(r"[A-Za-z0-9_.-]+")  # an IPv6 zone: an interface name or number
_NOT_IN_USER = set("'`\";&<>|(){}")  # OpenSSH's valid_ruser
_SETTING = re.compile(r"(\w+)(?:\s*=\s*|\s+)(.+)")  # a `Keyword value` line, as paramiko reads
_MAX_DEPTH = 16  # OpenSSH's READCONF_MAX_DEPTH for nested Includes
_MAX_FILES = 128  # files one ssh_config may read through its Includes, in all
_FILE_LIMIT = 1024 * 1024  # bytes of each
_NEVER = "Match originalhost !*"  # a Match block no host matches
_DROPPED = ("localcommand", "permitlocalcommand", "knownhostscommand")
_warned: set[tuple[str, int]] = set()  # each warning is told once per process


def check_address(value: str) -> str:
    """`value` when it is a DNS host name (dot-separated labels of letters, digits, `-`
    and `_`; no leading `-`) or an IPv4/IPv6 literal; ValueError for anything else."""
    if len(value) <= 253 and _DNS_NAME.fullmatch(value):
        return value
    try:
        ip = ipaddress.ip_address(value)
    except ValueError:
        raise ValueError(f"{value!r} is not a host name or an IP address") from None
    scope = getattr(ip, "scope_id", None)
    if scope is not None and not _SCOPE.fullmatch(scope):
        raise ValueError(f"{value!r}: the zone of an IPv6 address is an interface name")
    return value


def check_user(value: str) -> str:
    """`value` when OpenSSH's ssh takes it as a remote user (no leading `-`, none of
    '`";&<>|(){}, no trailing backslash) and it holds no whitespace or control character;
    ValueError otherwise."""
    bad = sorted({c for c in value if c in _NOT_IN_USER or c.isspace() or not c.isprintable()})
    if not value or value.startswith("-") or value.endswith("\\") or bad:
        why = f"holds {''.join(bad)!r}" if bad else "is empty, starts with - or ends with \\"
        raise ValueError(f"user {value!r} {why}: not a user OpenSSH accepts")
    return value


def check_port(value: int) -> int:
    if not 1 <= value <= 65535:
        raise ValueError(f"port {value} is not 1-65535")
    return value


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
    """`[user@]host[:port]` hops, comma separated, first hop first (an IPv6 host in
    brackets); `none`: no hop. ValueError for anything else."""
    if value == NO_JUMP:
        return ()
    return tuple(_hop(word) for word in value.split(","))


def _hop(word: str) -> Hop:
    user, at, rest = word.partition("@")
    try:
        host, port = _host_port(rest if at else word)
        return Hop(check_address(host), None if port is None else check_port(int(port)),
                   check_user(user) if at else None)
    except ValueError as e:
        raise ValueError(f"{word!r} is not [user@]host[:port] (ProxyJump): {e}") from None


def _host_port(text: str) -> tuple[str, str | None]:
    """`host`, `host:port` or `[ipv6]:port`, split; the port is digits or absent."""
    if text.startswith("["):
        host, close, tail = text[1:].partition("]")
        if not close or not isinstance(_ip(host), ipaddress.IPv6Address):
            raise ValueError("a bracketed host is an IPv6 address")
    else:
        host, colon, port = text.partition(":")
        tail = colon + port
    if tail and not (tail[0] == ":" and tail[1:].isdigit() and len(tail) <= 6):
        raise ValueError(f"{tail!r} is not :PORT")
    return host, tail[1:] or None


def _ip(text: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    try:
        return ipaddress.ip_address(text)
    except ValueError:
        return None


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
    """One ssh_config file, read once (read_ssh_config); a missing file says nothing of any
    host."""

    def __init__(self, path: Path | None) -> None:
        self.path = path
        text = read_ssh_config(path) if path is not None and path.exists() else ""
        self._config = paramiko.SSHConfig.from_text(text)

    def lookup(self, address: str) -> SshSettings:
        """The settings `ssh ADDRESS` would take from this file. ValueError for a
        ProxyCommand (rollout connects through ProxyJump only) or a bad value."""
        try:
            found = self._config.lookup(address)
        except paramiko.SSHException as e:  # a Match that cannot be evaluated
            raise ValueError(f"{address!r}: {e}") from e
        if found.get("proxycommand") is not None:
            raise ValueError(f"ProxyCommand for {address!r} is not supported; "
                             "use ProxyJump, or the inventory's proxy_jump")
        raw: str | list[str] = found.get("identityfile") or []
        files = [raw] if isinstance(raw, str) else list(raw)
        jump, user = found.get("proxyjump"), found.get("user")
        try:
            check_address(found.get("hostname", address))
            check_proxy_jump(jump)
            if user is not None:
                check_user(user)
        except ValueError as e:
            raise ValueError(f"ssh_config for {address!r}: {e}") from None
        return SshSettings(
            hostname=found.get("hostname", address),
            port=_port(found.get("port")),
            user=user,
            identity_file=Path(files[0]).expanduser() if files else None,
            proxy_jump=jump,
        )


def _port(value: str | None) -> int | None:
    if value is None:
        return None
    if not value.isdigit() or not 1 <= int(value) <= 65535:
        raise ValueError(f"Port {value!r} is not 1-65535")
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


def read_ssh_config(path: Path) -> str:
    """The ssh_config at `path` as text for paramiko, its Includes inlined, with nothing
    that runs a program. ConfigError (file, line) for a line that does not parse, an Include
    nested too deep or one rollout cannot scope; UnreadableFile for a file it cannot read."""
    return "".join(f"{line}\n" for line in _lines(path, 0, [], in_block=False)[0])


def _lines(path: Path, depth: int, read: list[Path], in_block: bool) -> tuple[list[str], bool]:
    """The cleaned lines of one file, and whether they open a Host or Match block.
    `read`: every file read so far; `in_block`: the file is included inside a block."""
    out: list[str] = []
    opens = False
    read.append(path)
    text = read_text(path, "ssh_config", limit=_FILE_LIMIT)
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        setting = _SETTING.fullmatch(line)
        if setting is None:
            raise ConfigError("not a `Keyword value` line", Location(str(path), number))
        key, value = setting[1].lower(), setting[2]
        where = Location(str(path), number, setting[1])
        if key in ("host", "match"):
            opens = in_block = True
            words = _words(where, value)
            out.append(_NEVER if key == "match" and _runs(where, words) else line)
        elif key == "include":
            lines, included_opens = _include(where, value, depth, read, in_block)
            out.extend(lines)
            opens |= included_opens
        elif key in _DROPPED:
            _warn(where, f"{setting[1]} is ignored: rollout runs no local command")
        else:
            out.append(line)
    return out, opens


def _runs(where: Location, criteria: list[str]) -> bool:
    """Whether a Match line has an `exec` criterion (then its block never matches)."""
    words = list(criteria)
    while words:
        kind = words.pop(0).lower().lstrip("!")
        if kind == "exec":
            _warn(where, "Match exec is not run: rollout runs no local command, so this "
                  "block applies to no host (write what it sets in the inventory)")  # fmt: skip
            return True
        if kind not in ("all", "canonical", "final") and words:
            words.pop(0)
    return False


def _include(where: Location, value: str, depth: int, read: list[Path],
             in_block: bool) -> tuple[list[str], bool]:  # fmt: skip
    """The lines of the files an Include names (globs; relative to ~/.ssh, as OpenSSH
    reads a user's config), each file in turn; a pattern that matches nothing adds none."""
    if depth >= _MAX_DEPTH:
        raise ConfigError(f"Include nested more than {_MAX_DEPTH} deep", where)
    out: list[str] = []
    opens = False
    for pattern in _words(where, value):
        full = Path(pattern).expanduser()
        if not full.is_absolute():
            full = Path("~/.ssh").expanduser() / full
        for name in sorted(glob.glob(str(full))):
            if len(read) >= _MAX_FILES:
                raise ConfigError(f"Include reads more than {_MAX_FILES} files", where)
            lines, file_opens = _lines(Path(name), depth + 1, read, in_block)
            if file_opens and in_block:
                raise ConfigError(f"{name} has Host or Match lines, which rollout cannot scope "
                                  "inside this block: move the Include above the first Host "
                                  "or Match line", where)  # fmt: skip
            out.extend(lines)
            opens |= file_opens
    if opens:
        out.append("Host *")  # back to the including file's top level: every host
    return out, opens


def _words(where: Location, value: str) -> list[str]:
    try:
        return shlex.split(value)
    except ValueError as e:
        raise ConfigError(f"cannot split the line: {e}", where) from None


def _warn(where: Location, message: str) -> None:
    if (where.file, where.line or 0) in _warned:
        return
    _warned.add((where.file, where.line or 0))
    print(f"warning: {where.file}:{where.line}: {message}", file=sys.stderr)
