"""The SSH side of failures in the operator's words: a connect or login that failed, the
keys a login offered, a session lost mid-run. The table and the words are
rollout.failures' (FAILURES); `failure`, `url_failure` and `docker_failure` are re-exported
here for the callers that import them from the transport."""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass

from rollout.errors import TransportError
from rollout.failures import docker_failure as docker_failure
from rollout.failures import failure as failure
from rollout.failures import network_cause
from rollout.failures import url_failure as url_failure

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


def connect_failure(error: BaseException, to: Dialled, keys: Callable[[], str],
                    waited: float = 0.0) -> TransportError:
    """The TransportError for a connection or login that failed, by its kind; `keys`: the
    keys offered, asked only for an authentication refused; `waited`: seconds the attempt
    took (a handshake that used all of `to.seconds` timed out, whatever paramiko raised)."""
    import paramiko

    if isinstance(error, paramiko.AuthenticationException) or (
        isinstance(error, paramiko.SSHException) and "authentication" in str(error).lower()
    ):
        return failure(TransportError, "auth", user=to.user, host=to.host, port=to.port,
                       keys=keys())
    host, port = _dialled_address(error, to)
    where = {"host": host, "port": port, "via": to.via}
    cause = network_cause(error) or ("timed out" if waited >= to.seconds > 0 else None)
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
