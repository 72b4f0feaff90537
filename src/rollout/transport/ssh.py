"""SSH transport over fabric: one connection per host, reused by every step.

Host keys: only the inventory's known_hosts file is trusted. An unknown key is refused
unless the policy is `accept-new`, which records it. A changed key is always refused. The
same holds for every jump host on the way (the host's proxy_jump).

Keys: the host's key_file alone where it has one; else, as OpenSSH does, the keys of the
SSH agent ($SSH_AUTH_SOCK) and the default files (~/.ssh/id_ed25519, id_ecdsa, id_rsa).
ssh_config was read when the inventory was loaded; fabric reads none of it again.
"""

from __future__ import annotations

import contextlib
import io
import os
import posixpath
import shlex
import socket
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, BinaryIO, Protocol, TypeVar

import paramiko
from fabric import Config, Connection

from rollout import failpoints
from rollout.errors import HostAnswerError, HostKeyError, TransportError
from rollout.jsontypes import JSON
from rollout.readfile import UnreadableFile, read_text
from rollout.secrets import head
from rollout.transport.agent import HostAgent, agent_command
from rollout.transport.base import (
    LocalFile,
    Progress,
    RunResult,
    Stream,
    Transport,
    call_command,
    local_size,
    opened,
)
from rollout.transport.channel import (
    OUTPUT_CAP,
    ChannelOutput,
    ChannelStream,
    run_on_channel,
    stream_to_channel,
)
from rollout.transport.failures import Dialled, connect_failure, failure, lost, offered_keys
from rollout.transport.known_hosts import load_known_hosts

T = TypeVar("T")
UPLOAD_CHUNK = 1 << 20  # bytes read from the file at a time
SMALL_UPLOAD = 4 << 20  # bytes: a smaller file is written by cat and hashed by sha256sum
UPLOAD_STALL = 300.0  # seconds an upload may make no progress before it is a lost connection


class SshTarget(Protocol):
    """What the transport needs to know of a host (rollout.config.inventory.Host has it)."""

    @property
    def name(self) -> str: ...
    @property
    def address(self) -> str: ...
    @property
    def port(self) -> int: ...
    @property
    def user(self) -> str: ...
    @property
    def key_file(self) -> Path | None: ...
    @property
    def known_hosts(self) -> Path: ...
    @property
    def host_key_policy(self) -> str: ...
    @property
    def connect_timeout(self) -> float: ...
    @property
    def proxy_jump(self) -> Sequence[JumpTarget]: ...


class JumpTarget(Protocol):
    """A jump host (rollout.config.sshconfig.JumpHost has it)."""

    @property
    def address(self) -> str: ...
    @property
    def port(self) -> int: ...
    @property
    def user(self) -> str: ...


class _AcceptNew(paramiko.MissingHostKeyPolicy):
    """Record an unknown key in the inventory's known_hosts (OpenSSH's accept-new)."""

    def __init__(self, known_hosts: Path) -> None:
        self.known_hosts = known_hosts

    def missing_host_key(
        self, client: paramiko.SSHClient, hostname: str, key: paramiko.PKey
    ) -> None:
        client.get_host_keys().add(hostname, key.get_name(), key)
        self.known_hosts.parent.mkdir(parents=True, exist_ok=True)
        with self.known_hosts.open("a") as f:
            f.write(f"{hostname} {key.get_name()} {key.get_base64()}\n")


class _Refuse(paramiko.MissingHostKeyPolicy):
    def __init__(self, known_hosts: Path) -> None:
        self.known_hosts = known_hosts

    def missing_host_key(
        self, client: paramiko.SSHClient, hostname: str, key: paramiko.PKey
    ) -> None:
        host, port = _entry_address(hostname)
        raise failure(HostKeyError, "host-key-unknown", host=host, port=port,
                      key=f"{key.get_name()} {key.fingerprint}", known_hosts=self.known_hosts,
                      command=f"{shlex.join(['ssh-keyscan', '-p', str(port), host])} >> "
                              f"{shlex.quote(str(self.known_hosts))}")


def _entry_address(entry: str) -> tuple[str, int]:
    """A known_hosts entry's host and port: `[HOST]:PORT`, or HOST for port 22."""
    if entry.startswith("[") and "]:" in entry:
        host, _, port = entry[1:].rpartition("]:")
        if port.isdigit():
            return host, int(port)
    return entry, 22


def _changed(e: paramiko.BadHostKeyException, target: SshTarget) -> HostKeyError:
    hops = [target, *target.proxy_jump]  # paramiko names the address alone
    port = next((h.port for h in hops if h.address == e.hostname), target.port)
    entry = e.hostname if port == 22 else f"[{e.hostname}]:{port}"
    command = shlex.join(["ssh-keygen", "-R", entry, "-f", str(target.known_hosts)])
    return failure(HostKeyError, "host-key-changed", host=e.hostname, port=port,
                   expected=e.expected_key.fingerprint, got=e.key.fingerprint, command=command)

# Host side of put_and_digest: stdin into the file, hashed on the way; prints the digest.
_WRITE_AND_HASH = """import hashlib, os, sys
path, mode, digest = sys.argv[1], int(sys.argv[2], 8), hashlib.sha256()
with open(path, "wb") as out:
    for chunk in iter(lambda: sys.stdin.buffer.read(1 << 20), b""):
        digest.update(chunk)
        out.write(chunk)
os.chmod(path, mode)
print(digest.hexdigest())
"""


IDLE_WAKE = 10.0  # seconds between an idle connection's checks for its own close


def _aead_first(sock: Any, disabled_algorithms: dict[str, Any] | None = None) -> paramiko.Transport:
    """A paramiko transport that offers AES-GCM first: one pass of C per packet, where
    paramiko's first choice, aes128-ctr with an HMAC, spends about a third more controller
    CPU per byte uploaded. Every other cipher stays on offer, in paramiko's order.

    The socket sends each packet at once (TCP_NODELAY), as OpenSSH's client does: with
    Nagle's algorithm on, a command's small packets waited for the far end's delayed ACK,
    about 40 ms per round trip, 45 ms for `true` against 2.5 ms without.

    Its reader thread wakes every 10 s on an idle connection (IDLE_WAKE), not every 0.1 s
    as paramiko's does: a run holds every locked host's connection for its whole length,
    and each wake-up costs controller CPU (64 idle lab connections: 445 us per
    connection-second at 0.1 s, 50 to 107 at 1 s, 27 at 5 s, 8 at 15 s), which at 5,000
    hosts and one wake a second was a third of a core. The wake-up only looks for a close
    and sends the keepalive when due (every 15 s: it goes within 25): a closed
    connection's (daemon) thread ends within 10 s, and closing does not wait for it. Data,
    a reply and the far end's close wake it at once."""
    if isinstance(sock, socket.socket) and sock.family in (socket.AF_INET, socket.AF_INET6):
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    transport = paramiko.Transport(sock, disabled_algorithms=disabled_algorithms)
    transport.sock.settimeout(IDLE_WAKE)
    options = transport.get_security_options()
    aead = tuple(c for c in options.ciphers if c.endswith("-gcm@openssh.com"))
    options.ciphers = aead + tuple(c for c in options.ciphers if c not in aead)
    return transport


KEY_LIMIT = 1 << 20  # bytes: an RSA key of 16,384 bits is under 13 KiB
_KEY_TYPES = (paramiko.RSAKey, paramiko.ECDSAKey, paramiko.Ed25519Key)


def load_private_key(path: Path) -> paramiko.PKey:
    """The key_file's private key, read by rollout.readfile (a regular file, bounded; a
    link is followed: operators link their dotfiles), with its `-cert.pub` certificate
    where one lies beside it, as paramiko's own key_filename does. UnreadableFile naming
    the path, never the key's bytes, when it cannot be read or is not a key."""
    text = read_text(path, "key_file", limit=KEY_LIMIT)
    for key_type in _KEY_TYPES:
        try:
            key: paramiko.PKey = key_type.from_private_key(io.StringIO(text))
        except paramiko.PasswordRequiredException:
            raise UnreadableFile(path, "key_file", "is passphrase-protected: rollout asks for "
                                 "no passphrase (leave key_file out to use ssh-agent)") from None
        except Exception:  # noqa: BLE001 - paramiko raises many types for another key type
            continue
        cert = Path(f"{path}-cert.pub")
        if cert.exists():
            try:
                key.load_certificate(read_text(cert, "key_file certificate", limit=KEY_LIMIT))
            except (ValueError, paramiko.SSHException):
                raise UnreadableFile(cert, "key_file certificate", "is not a certificate "
                                     "of the key") from None
        return key
    raise UnreadableFile(path, "key_file", "is not a private key rollout can read (RSA, ECDSA "
                         "or Ed25519, in PEM or OpenSSH format)")


def _counted(chunks: Iterator[bytes], progress: Progress | None) -> Iterator[bytes]:
    """The chunks, `progress` told the running total after each one is sent."""
    sent = 0
    for chunk in chunks:
        yield chunk
        sent += len(chunk)
        if progress is not None:
            progress(sent)


def _from(start: int, progress: Progress) -> Progress:
    """`progress` told the bytes on the host: what was there before, and what was sent."""
    return lambda sent: progress(start + sent)


class SshTransport(Transport):
    def __init__(self, target: SshTarget) -> None:
        self.name = target.name
        self.target = target
        self._conn: Connection | None = None
        self._agent: HostAgent | None = None
        self._agentless = False  # the host could not start one: plain exec channels
        self._pkey: paramiko.PKey | None = None  # the key_file's key, read once

    def open(self) -> None:
        """Connect and log in now (TransportError, HostKeyError), with no command: the
        first command then costs one round trip, not a handshake."""
        self._connection()

    def _connection(self) -> Connection:
        if self._conn is None or not self._conn.is_connected:
            self._conn = self._open()
        return self._conn

    def _open(self) -> Connection:
        t = self.target
        try:
            conn = self._unopened()
        except UnreadableFile as e:
            raise failure(TransportError, "key-file", path=e.path, why=e.why) from None
        started = time.monotonic()
        try:
            conn.open()
        except HostKeyError:
            raise
        except paramiko.BadHostKeyException as e:
            raise _changed(e, t) from None
        except (TimeoutError, paramiko.SSHException, OSError, EOFError) as e:
            _close_all(conn)
            to = Dialled(t.user, t.address, t.port, t.connect_timeout, _via(t))
            raise connect_failure(e, to, lambda: offered_keys(t.key_file, self._pkey),
                                  time.monotonic() - started) from e
        for hop_conn in _chain(conn):
            transport = hop_conn.client.get_transport()
            if transport is not None:
                transport.set_keepalive(15)
        return conn

    def _unopened(self) -> Connection:
        """The connection to the host, through its jump hosts in turn; none open yet."""
        gateway: Connection | bool = False
        for hop in self.target.proxy_jump:
            gateway = self._checked(hop, gateway)
        return self._checked(self.target, gateway)

    def _checked(self, to: JumpTarget, gateway: Connection | bool) -> Connection:
        """A connection (not yet open) to `to`, through `gateway` (False: none), that checks
        its host key against the inventory's known_hosts and logs in with this host's keys."""
        t = self.target
        kwargs: dict[str, object] = {"transport_factory": _aead_first}
        if t.key_file is None:
            kwargs |= {"look_for_keys": True, "allow_agent": True}
        else:
            kwargs |= {"pkey": self._private_key(t.key_file), "look_for_keys": False,
                       "allow_agent": False}
        conn = Connection(
            host=to.address, user=to.user, port=to.port, gateway=gateway,
            config=Config(lazy=True),  # ssh_config was read with the inventory: not again
            connect_timeout=int(t.connect_timeout), connect_kwargs=kwargs,
        )
        if t.known_hosts.exists():  # a garbage line: skipped with a warning (file:line)
            load_known_hosts(conn.client.get_host_keys(), t.known_hosts)
        policy_cls = _AcceptNew if t.host_key_policy == "accept-new" else _Refuse
        conn.client.set_missing_host_key_policy(policy_cls(t.known_hosts))
        return conn

    def _private_key(self, path: Path) -> paramiko.PKey:
        if self._pkey is None:
            self._pkey = load_private_key(path)
        return self._pkey

    def run(
        self, command: str, timeout: float | None = None, stdin: str | None = None
    ) -> RunResult:
        """Run `command`; `stdin` goes over the channel, never into the command line."""
        agent = self._host_agent()
        if agent is not None:
            return self._through(agent, lambda: agent.shell(command, timeout, stdin),
                                 f"`{head(command, 60)}`")
        try:
            return self._exec(command, timeout, stdin)
        except (paramiko.SSHException, OSError, EOFError) as e:
            self._drop()
            raise lost(self.name, f"`{head(command, 60)}`", e) from e

    def _exec(self, command: str, timeout: float | None, stdin: str | None) -> RunResult:
        """`command` on an exec channel of its own."""
        transport = self._connection().client.get_transport()
        if transport is None:
            raise paramiko.SSHException("no SSH transport")
        data = None if stdin is None else stdin.encode()
        out = run_on_channel(transport, command, data, timeout)
        _refuse_oversized(self.name, command, out)
        stdout, stderr = out.text()
        if out.timed_out:
            return RunResult(command, 124, stdout, stderr + "\n(timed out)")
        return RunResult(command, out.exit_code, stdout, stderr)

    def run_script(self, source: str, args: Sequence[str], timeout: float | None = None,
                   before: str = "") -> RunResult:
        agent = self._host_agent()
        if agent is None:
            return super().run_script(source, args, timeout, before)
        return self._through(agent, lambda: agent.script(source, args, timeout, before),
                             "a host script")

    def call(self, source: str, call: str, kwargs: Mapping[str, JSON],
             timeout: float | None = None) -> RunResult:
        agent = self._host_agent()
        if agent is None:
            return super().call(source, call, kwargs, timeout)
        return self._through(agent, lambda: agent.call(source, call, kwargs, timeout), call)

    def call_beside(self, source: str, call: str, kwargs: Mapping[str, JSON],
                    timeout: float | None = None, wait: float = 0.0) -> RunResult:
        """Through the agent when it is free within `wait` seconds; while it still runs
        another command, on an exec channel of its own (a python3 of its own on the host,
        so only past a wait that most calls end within). A failure there is this call's
        alone: the connection, and the command under way on it, are kept."""
        agent = self._agent
        if agent is None:
            return self.call(source, call, kwargs, timeout)
        answer = self._through(
            agent, lambda: agent.call_if_free(source, call, kwargs, timeout, wait), call)
        if answer is not None:
            return answer
        command, feed = call_command(source, call, kwargs)
        try:
            return self._exec(command, timeout, feed)
        except (paramiko.SSHException, OSError, EOFError) as e:
            raise lost(self.name, call, e) from e

    def keeps_sources(self) -> bool:
        return self._agent is not None

    def _host_agent(self) -> HostAgent | None:
        """The connection's agent, started on its first command; None where the host has
        none to give (then every command is an exec channel of its own)."""
        if self._agent is not None and self._conn is not None and self._conn.is_connected:
            return self._agent
        self._agent = None
        if self._agentless:
            return None
        command, stdin = agent_command()
        self._agent = HostAgent.start(self.name, self.open_stream(command, stdin))
        self._agentless = self._agent is None
        return self._agent

    def _through(self, agent: HostAgent, call: Callable[[], T], what: str) -> T:
        try:
            return call()
        except TransportError:
            self._drop()
            raise
        except (paramiko.SSHException, OSError, EOFError) as e:
            self._drop()
            raise lost(self.name, what, e) from e

    def open_stream(self, command: str, stdin: bytes) -> Stream:
        transport = self._connection().client.get_transport()
        try:
            if transport is None:
                raise paramiko.SSHException("no SSH transport")
            return ChannelStream.open(transport, command, stdin)
        except (paramiko.SSHException, OSError, EOFError) as e:
            self._drop()
            raise lost(self.name, f"the start of `{head(command, 60)}`", e) from e

    def put(self, local_path: LocalFile, remote_path: str, resume: bool = False,
            progress: Progress | None = None) -> None:
        start = self._remote_size(remote_path) if resume else 0
        if start > local_size(local_path):
            start = 0
        redirect = ">>" if start else ">"
        folder = shlex.quote(posixpath.dirname(remote_path) or "/")
        told = None if progress is None else _from(start, progress)
        self._upload(local_path, start, f"mkdir -p -- {folder} && cat {redirect} "
                                        f"{shlex.quote(remote_path)}", told).check()

    def put_and_digest(self, local_path: LocalFile, remote_path: str, mode: int = 0o644,
                       progress: Progress | None = None) -> str:
        """One round trip: the host writes the bytes and hashes them as they arrive (python3's
        hashlib: a third of sha256sum's CPU, and no second read). A file under
        SMALL_UPLOAD, or a host without python3: `cat`, then sha256sum reads it back from
        the page cache (a python3 that starts costs the host more than that read)."""
        path, folder = shlex.quote(remote_path), shlex.quote(posixpath.dirname(remote_path) or "/")
        plain = f"cat > {path} && chmod {mode:o} -- {path} && sha256sum < {path}"
        if local_size(local_path) < SMALL_UPLOAD:
            command = f"mkdir -p -- {folder} && {plain}"
        else:
            command = (f"mkdir -p -- {folder} && if command -v python3 >/dev/null; then "
                       f"python3 -c {shlex.quote(_WRITE_AND_HASH)} {path} {mode:o}; else "
                       f"{plain}; fi")
        words = self._upload(local_path, 0, command, progress).check().stdout.split()
        return words[0] if words else ""

    def _remote_size(self, remote_path: str) -> int:
        r = self.run(f"stat -c %s -- {shlex.quote(remote_path)} 2>/dev/null || echo 0")
        return int(r.stdout.strip() or 0) if r.stdout.strip().isdigit() else 0

    def _upload(self, local_path: LocalFile, start: int, command: str,
                progress: Progress | None = None) -> RunResult:
        """Run `command` with the file's bytes from `start` as its stdin; `progress` is told
        the bytes handed to the channel so far."""
        transport = self._connection().client.get_transport()
        try:
            if transport is None:
                raise paramiko.SSHException("no SSH transport")
            with opened(local_path) as src:
                src.seek(start)
                chunks = _counted(self._chunks(src), progress)
                out = stream_to_channel(transport, command, chunks, UPLOAD_STALL)
            if out.exit_code == -1 and not transport.is_active():
                raise EOFError("the connection closed before the command's exit status came")
        except (paramiko.SSHException, OSError, EOFError) as e:
            self._drop()
            raise lost(self.name, f"the upload of {_named(local_path)}", e) from e
        _refuse_oversized(self.name, command, out)
        stdout, stderr = out.text()
        return RunResult(command, out.exit_code, stdout, stderr)

    def _chunks(self, src: BinaryIO) -> Iterator[bytes]:
        """The file's bytes; the failpoints cut the connection half-way, or flip a byte."""
        size = os.fstat(src.fileno()).st_size - src.tell()
        drop = failpoints.hit("upload-drop", self.name)
        corrupt = failpoints.hit("upload-corrupt", self.name)
        sent = 0
        while chunk := src.read(UPLOAD_CHUNK):
            half = size // 2 - sent
            if corrupt and 0 <= half < len(chunk):
                flipped = bytearray(chunk)
                flipped[half] ^= 0xFF
                chunk = bytes(flipped)
            if drop and half < len(chunk):
                cut = max(1, half)
                yield chunk[:cut]
                self._conn.client.get_transport().sock.close()  # type: ignore[union-attr]
                drop, chunk = False, chunk[cut:]
            yield chunk
            sent += len(chunk)

    def get(self, remote_path: str, local_path: str) -> None:
        try:
            self._connection().get(remote_path, local_path)
        except (paramiko.SSHException, OSError, EOFError) as e:
            self._drop()
            raise lost(self.name, f"the download of {remote_path}", e) from e

    def _drop(self) -> None:
        """Forget a connection that failed; closing a dead one may fail too, harmlessly."""
        agent, self._agent = self._agent, None
        if agent is not None:
            with contextlib.suppress(Exception):
                agent.close()
        conn, self._conn = self._conn, None
        if conn is not None:
            _close_all(conn)

    def close(self) -> None:
        self._drop()


def _chain(conn: Connection) -> list[Connection]:
    """The connection and the jump hosts under it, the target first."""
    out = [conn]
    while isinstance(out[-1].gateway, Connection):
        out.append(out[-1].gateway)
    return out


def _close_all(conn: Connection) -> None:
    """Close the connection, then its jump hosts (fabric closes only the first); closing
    a dead one may fail, harmlessly."""
    for each in _chain(conn):
        with contextlib.suppress(Exception):
            each.close()


def _named(local: LocalFile) -> str:
    return local if isinstance(local, str) else "an open file"


def _via(target: SshTarget) -> str:
    hops = ", ".join(f"{h.user}@{h.address}:{h.port}" for h in target.proxy_jump)
    return f" via {hops}" if hops else ""


def _refuse_oversized(name: str, command: str, out: ChannelOutput) -> None:
    """A command whose output went past OUTPUT_CAP (reading stopped there) fails its host."""
    if out.oversized:
        raise HostAnswerError(f"{name}: the {out.oversized} of `{head(command, 80)}` went "
                              f"past the {OUTPUT_CAP >> 20} MiB cap: refused")
