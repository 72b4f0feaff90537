"""What failed to be reached, in the operator's words, each with its fix: one table (FAILURES),
read by the code that raises (config, transport, bundle, the lab, the engine) and by
docs/errors.md (generated from it: `errors_markdown`). The SSH side's own cases (a connect, a
login, a lost session) are in rollout.transport.failures.

A library's exception is never shown as it is: it is classified by its type and errno
(ConnectionRefusedError, a timeout, a name that does not resolve, ...), found anywhere in its
chain. What a server said (a banner, an HTTP reason) is shown escaped and cut."""

from __future__ import annotations

import errno
import os
import shlex
import socket
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TypeVar

from rollout.errors import RolloutError
from rollout.output.escape import control_escaped
from rollout.secrets import head

E = TypeVar("E", bound=RolloutError)
SHOWN = 240  # characters of a value from outside (a banner, a reason, a name) shown


@dataclass(frozen=True)
class Failure:
    """One kind of failure: `words` (a str.format template) and its fix; its message reads
    `WORDS (fix: FIX)`. `status`: the result of a host that ends at it before any step
    (its connection or its lock): `unreachable` where no session on the host was had (the
    network, sshd, the login, its host key), `failed` where the host was reached or where
    the cause is on this side (a key file)."""

    words: str
    fix: str
    status: str = "failed"

    def said(self, **fields: object) -> str:
        shown = {k: head(control_escaped(v), SHOWN) for k, v in fields.items()}
        return f"{self.words.format(**shown)} (fix: {self.fix.format(**shown)})"


FAILURES: dict[str, Failure] = {
    "refused": Failure("unreachable: connection refused on {host}:{port}{via}",
                       "check that sshd runs there and that the port is right",
                       status="unreachable"),
    "no-route": Failure("unreachable: no route to {host}{via}",
                        "check the address, and that the host and its network are up",
                        status="unreachable"),
    "timed-out": Failure("unreachable: timed out after {seconds}s connecting to "
                         "{host}:{port}{via}",
                         "check that the host is up and that no firewall drops the port "
                         "(connect_timeout sets the wait)",
                         status="unreachable"),
    "no-address": Failure("unreachable: {host} does not resolve{via}",
                          "check the address, or the ssh_config alias that names it",
                          status="unreachable"),
    "no-ssh": Failure("unreachable: {host}:{port}{via} {how}",
                      "check that the port is sshd's and that the host is not paused or "
                      "overloaded",
                      status="unreachable"),
    "auth": Failure("authentication refused for {user}@{host}:{port}: offered keys: {keys}",
                    "add one of these public keys to ~{user}/.ssh/authorized_keys on the "
                    "host, or name the right key_file (or user) in the inventory",
                    status="unreachable"),
    "key-file": Failure("key file unreadable: {path} ({why})",
                        "point key_file at a readable private key without a passphrase, "
                        "or leave it out to use ssh-agent"),
    "host-key-unknown": Failure("host key unknown for {host}:{port} ({key}, not in "
                                "{known_hosts})",
                                "check that key, then `{command}`; or set host_key_policy: "
                                "accept-new in the inventory",
                                status="unreachable"),
    "host-key-changed": Failure("host key CHANGED for {host}:{port}: expected {expected}, "
                                "got {got}",
                                "find out why (a recreated instance?), then `{command}`",
                                status="unreachable"),
    "lost": Failure("connection lost to {host} during {what}{cause}",
                    "check that the host is up and not paused, then run again",
                    status="unreachable"),
    "path-denied": Failure("permission denied on {path} for user {user}",
                           "let {user} write there (chown or chmod on the host), or "
                           "connect as a user who can"),
    "docker-down": Failure("Docker is not running (could not reach {socket})",
                           "start it with 'systemctl start docker' or 'dockerd &' (run as "
                           "root, rollout starts dockerd itself)"),
    "docker-host": Failure("the Docker engine at DOCKER_HOST={socket} does not answer",
                           "check that engine, or unset DOCKER_HOST (rollout starts a local "
                           "dockerd only when it is unset)"),
    "docker-denied": Failure("Docker refused this user at {socket} (permission denied)",
                             "add the user to the docker group, or run as root"),
    "url": Failure("cannot fetch {url}: {why}",
                   "check the URL, and that its server is up and reachable from here"),
}


def failure(cls: type[E], kind: str, **fields: object) -> E:
    """An error of type `cls` in FAILURES' words for `kind`; `kind` kept on it."""
    error = cls(FAILURES[kind].said(**fields))
    error.kind = kind
    return error


def host_status(kind: str) -> str:
    """The result of a host whose connection or lock failed with an error of `kind`
    (Failure.status); `unreachable` for an error of no kind."""
    return FAILURES[kind].status if kind in FAILURES else "unreachable"


def errors_markdown() -> str:
    """The table of docs/errors.md: each kind, its words, its fix, and a host's result."""
    rows = ["| kind | message | fix | host's result |", "| --- | --- | --- | --- |"]
    rows += [f"| `{kind}` | {f.words} | {f.fix} | {f.status} |" for kind, f in FAILURES.items()]
    return "\n".join(rows).replace("{via}", "") + "\n"


def chain(error: BaseException) -> Iterator[BaseException]:
    """`error` and every exception it wraps: its cause and context, a `reason` (urllib3),
    exceptions in its args (requests, docker) and in an `errors` mapping (paramiko's
    NoValidConnectionsError), depth first, each once."""
    seen: set[int] = set()
    todo = [error]
    while todo:
        each = todo.pop(0)
        if id(each) in seen:
            continue
        seen.add(id(each))
        yield each
        inner = [each.__cause__, each.__context__, getattr(each, "reason", None), *each.args]
        errors = getattr(each, "errors", None)
        if isinstance(errors, dict):
            inner += list(errors.values())
        todo += [x for x in inner if isinstance(x, BaseException)]


def network_cause(error: BaseException) -> str | None:
    """What went wrong with a connection, in words, from the first OS-level cause in the
    chain: "connection refused", "timed out", "does not resolve", "no route"; None when
    none is there."""
    for each in chain(error):
        if isinstance(each, socket.gaierror):
            return "does not resolve"
        if isinstance(each, ConnectionRefusedError):
            return "connection refused"
        if isinstance(each, TimeoutError | socket.timeout):
            return "timed out"
        if isinstance(each, OSError) and each.errno in (errno.EHOSTUNREACH, errno.ENETUNREACH):
            return "no route"
        if isinstance(each, ConnectionResetError | BrokenPipeError):
            return "connection reset"
    return None


def url_failure(cls: type[E], url: str, error: BaseException | None = None,
                status: int | None = None, reason: str = "") -> E:
    """`cannot fetch URL: connection refused / timed out / HTTP 404 Not Found`."""
    if status is not None:
        why = f"HTTP {status} {head(control_escaped(reason), SHOWN)}".rstrip()
    else:
        why = (network_cause(error) if error is not None else None) or "no answer"
    return failure(cls, "url", url=url, why=why)


def docker_failure(cls: type[E], error: BaseException) -> E:
    """Docker's SDK could not talk to the engine: not running, or this user refused."""
    socket_path = os.environ.get("DOCKER_HOST") or "/var/run/docker.sock"
    if any(isinstance(x, PermissionError) for x in chain(error)):
        return failure(cls, "docker-denied", socket=socket_path)
    if os.environ.get("DOCKER_HOST"):
        return failure(cls, "docker-host", socket=socket_path)
    return failure(cls, "docker-down", socket=socket_path)


def fix_command(*words: str) -> str:
    """A shell command for a fix, each word quoted (a host name is hostile)."""
    return shlex.join(words)
