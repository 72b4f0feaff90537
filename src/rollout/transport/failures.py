"""What failed to be reached, in the operator's words, each with its fix: one table (FAILURES),
read by the code that raises and by docs/errors.md (generated from it: `errors_markdown`).

A library's exception is never shown as it is: it is classified by its type and errno
(ConnectionRefusedError, a timeout, a name that does not resolve, ...), found anywhere in its
chain. What a server said (a banner, an HTTP reason) is shown escaped and cut."""

from __future__ import annotations

import errno
import os
import shlex
import socket
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import TypeVar

from rollout.errors import RolloutError, TransportError
from rollout.output.escape import control_escaped
from rollout.secrets import head

E = TypeVar("E", bound=RolloutError)
SHOWN = 240  # characters of a value from outside (a banner, a reason, a name) shown


@dataclass(frozen=True)
class Failure:
    """One kind of failure: `words` (a str.format template) and its fix; its message reads
    `WORDS (fix: FIX)`."""

    words: str
    fix: str

    def said(self, **fields: object) -> str:
        shown = {k: head(control_escaped(v), SHOWN) for k, v in fields.items()}
        return f"{self.words.format(**shown)} (fix: {self.fix.format(**shown)})"


FAILURES: dict[str, Failure] = {
    "refused": Failure("unreachable: connection refused on {host}:{port}{via}",
                       "check that sshd runs there and that the port is right"),
    "no-route": Failure("unreachable: no route to {host}{via}",
                        "check the address, and that the host and its network are up"),
    "timed-out": Failure("unreachable: timed out after {seconds}s connecting to "
                         "{host}:{port}{via}",
                         "check that the host is up and that no firewall drops the port "
                         "(connect_timeout sets the wait)"),
    "no-address": Failure("unreachable: {host} does not resolve{via}",
                          "check the address, or the ssh_config alias that names it"),
    "no-ssh": Failure("unreachable: {host}:{port}{via} {how}",
                      "check that the port is sshd's and that the host is not paused or "
                      "overloaded"),
    "auth": Failure("authentication refused for {user}@{host}:{port}: offered keys: {keys}",
                    "add one of these public keys to ~{user}/.ssh/authorized_keys on the "
                    "host, or name the right key_file (or user) in the inventory"),
    "key-file": Failure("key file unreadable: {path} ({why})",
                        "point key_file at a readable private key without a passphrase, "
                        "or leave it out to use ssh-agent"),
    "host-key-unknown": Failure("host key unknown for {host}:{port} ({key}, not in "
                                "{known_hosts})",
                                "check that key, then `{command}`; or set host_key_policy: "
                                "accept-new in the inventory"),
    "host-key-changed": Failure("host key CHANGED for {host}:{port}: expected {expected}, "
                                "got {got}",
                                "find out why (a recreated instance?), then `{command}`"),
    "lost": Failure("connection lost to {host} during {what}{cause}",
                    "check that the host is up and not paused, then run again"),
    "path-denied": Failure("permission denied on {path} for user {user}",
                           "let {user} write there (chown or chmod on the host), or "
                           "connect as a user who can"),
    "docker-down": Failure("Docker is not running (could not reach {socket})",
                           "start it with 'systemctl start docker' or 'dockerd &'"),
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


def errors_markdown() -> str:
    """The table of docs/errors.md: each kind, its words and its fix."""
    rows = ["| kind | message | fix |", "| --- | --- | --- |"]
    rows += [f"| `{kind}` | {f.words} | {f.fix} |" for kind, f in FAILURES.items()]
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
    return failure(cls, "docker-down", socket=socket_path)


def fix_command(*words: str) -> str:
    """A shell command for a fix, each word quoted (a host name is hostile)."""
    return shlex.join(words)


DEFAULT_KEYS = ("id_rsa", "id_dsa", "id_ecdsa", "id_ed25519")  # paramiko's look_for_keys


def offered_keys(key_file: os.PathLike[str] | None, key: object | None) -> str:
    """The keys a login offered, for an authentication refused: the key_file (its path and
    fingerprint), or the ssh-agent's keys (fingerprint and comment) and the ~/.ssh files."""
    if key_file is not None:
        return f"{os.fspath(key_file)} ({_fingerprint(key)})"
    offered = [f"ssh-agent {_fingerprint(k)} {getattr(k, 'comment', '')}".rstrip()
               for k in _agent_keys()]
    home = os.path.expanduser("~/.ssh")
    offered += [os.path.join(home, n) for n in DEFAULT_KEYS
                if os.path.isfile(os.path.join(home, n))]
    return ", ".join(offered) or "none (no key_file, no ssh-agent key, no ~/.ssh/id_* file)"


def _agent_keys() -> list[object]:
    import paramiko

    if not os.environ.get("SSH_AUTH_SOCK"):
        return []
    agent = paramiko.Agent()
    try:
        return list(agent.get_keys())
    except Exception:  # noqa: BLE001 - an agent that cannot be asked offered nothing
        return []
    finally:
        agent.close()


def _fingerprint(key: object | None) -> str:
    fingerprint = getattr(key, "fingerprint", None)
    return fingerprint if isinstance(fingerprint, str) else "key not read"


@dataclass(frozen=True)
class Dialled:
    """Where a connection went: for the words of its failure."""

    user: str
    host: str
    port: int
    seconds: float
    via: str = ""  # " via USER@JUMP:PORT, ..." or ""


def connect_failure(error: BaseException, to: Dialled, keys: Callable[[], str]) -> TransportError:
    """The TransportError for a connection or login that failed, by its kind; `keys`: the
    keys offered, asked only for an authentication refused."""
    import paramiko

    if isinstance(error, paramiko.AuthenticationException) or (
        isinstance(error, paramiko.SSHException) and "authentication" in str(error).lower()
    ):
        return failure(TransportError, "auth", user=to.user, host=to.host, port=to.port,
                       keys=keys())
    host, port = _dialled_address(error, to)
    where = {"host": host, "port": port, "via": to.via}
    cause = network_cause(error)
    if isinstance(error, paramiko.SSHException | EOFError) and cause != "connection refused":
        how = ("did not finish the SSH handshake in time" if cause == "timed out"
               else "closed the connection during the SSH handshake")
        return failure(TransportError, "no-ssh", how=how, **where)
    kinds = {"connection refused": "refused", "no route": "no-route",
             "does not resolve": "no-address", "timed out": "timed-out"}
    if cause in kinds:
        return failure(TransportError, kinds[cause], seconds=f"{to.seconds:g}", **where)
    return failure(TransportError, "no-ssh", how="refused the connection or closed it",
                   **where)


def _dialled_address(error: BaseException, to: Dialled) -> tuple[str, int]:
    """The address that failed: paramiko's NoValidConnectionsError names it, else the
    host's own."""
    errors = getattr(error, "errors", None)
    if isinstance(errors, dict) and errors:
        first = next(iter(errors))
        if isinstance(first, tuple) and len(first) >= 2:
            return str(first[0]), int(first[1])
    return to.host, to.port


def lost(name: str, what: str, error: BaseException | None = None,
         why: str = "") -> TransportError:
    """`connection lost to HOST during WHAT`, with its cause (`why`, or the error's) where
    one is known."""
    cause = why or (network_cause(error) if error is not None else None)
    return failure(TransportError, "lost", host=name, what=what,
                   cause=f" ({cause})" if cause else "")
