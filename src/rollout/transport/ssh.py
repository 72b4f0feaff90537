"""SSH transport over fabric: one connection per host, reused by every step.

Host keys: only the inventory's known_hosts file is trusted. An unknown key is refused
unless the policy is `accept-new`, which records it. A changed key is always refused.
"""

from __future__ import annotations

import contextlib
import os
import shutil
from pathlib import Path
from typing import Protocol

import paramiko
from fabric import Connection

from rollout import failpoints
from rollout.errors import HostKeyError, TransportError
from rollout.transport.base import RunResult, Transport
from rollout.transport.channel import run_on_channel


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
        raise HostKeyError(
            f"unknown host key for {hostname} ({key.get_name()}): not in {self.known_hosts}. "
            "Add it there, or set host_key_policy: accept-new in the inventory."
        )


class SshTransport(Transport):
    def __init__(self, target: SshTarget) -> None:
        self.name = target.name
        self.target = target
        self._conn: Connection | None = None

    def _connection(self) -> Connection:
        if self._conn is None or not self._conn.is_connected:
            self._conn = self._open()
        return self._conn

    def _open(self) -> Connection:
        t = self.target
        kwargs: dict[str, object] = {"look_for_keys": False, "allow_agent": False}
        if t.key_file is not None:
            kwargs["key_filename"] = str(t.key_file)
        conn = Connection(
            host=t.address,
            user=t.user,
            port=t.port,
            connect_timeout=int(t.connect_timeout),
            connect_kwargs=kwargs,
        )
        try:
            if t.known_hosts.exists():
                conn.client.load_host_keys(str(t.known_hosts))
        except (OSError, paramiko.SSHException) as e:
            raise HostKeyError(f"cannot read known_hosts {t.known_hosts}: {e}") from e
        policy_cls = _AcceptNew if t.host_key_policy == "accept-new" else _Refuse
        conn.client.set_missing_host_key_policy(policy_cls(t.known_hosts))
        try:
            conn.open()
        except HostKeyError:
            raise
        except paramiko.BadHostKeyException as e:
            raise HostKeyError(
                f"host key for {t.address}:{t.port} CHANGED (got {e.key.get_name()} "
                f"{e.key.get_base64()[:24]}...). Refusing to connect. If the instance was "
                f"recreated, remove its old line from {t.known_hosts}."
            ) from e
        except (TimeoutError, paramiko.SSHException, OSError, EOFError) as e:
            raise TransportError(f"cannot reach {t.user}@{t.address}:{t.port}: {e}") from e
        transport = conn.client.get_transport()
        if transport is not None:
            transport.set_keepalive(15)
        return conn

    def run(
        self, command: str, timeout: float | None = None, stdin: str | None = None
    ) -> RunResult:
        """Run `command`; `stdin` goes over the channel, never into the command line."""
        transport = self._connection().client.get_transport()
        data = None if stdin is None else stdin.encode()
        try:
            if transport is None:
                raise paramiko.SSHException("no SSH transport")
            out = run_on_channel(transport, command, data, timeout)
        except (paramiko.SSHException, OSError, EOFError) as e:
            self._drop()
            raise TransportError(f"{self.name}: connection lost: {e}") from e
        stdout, stderr = out.text()
        if out.timed_out:
            return RunResult(command, 124, stdout, stderr + "\n(timed out)")
        return RunResult(command, out.exit_code, stdout, stderr)

    def put(self, local_path: str, remote_path: str, resume: bool = False) -> None:
        try:
            self._put(local_path, remote_path, resume)
        except (paramiko.SSHException, OSError, EOFError) as e:
            self._drop()
            raise TransportError(f"{self.name}: upload of {local_path} failed: {e}") from e

    def _put(self, local_path: str, remote_path: str, resume: bool) -> None:
        sftp = self._connection().sftp()
        start = 0
        if resume:
            with contextlib.suppress(OSError):
                start = sftp.stat(remote_path).st_size or 0
            if start > os.path.getsize(local_path):
                start = 0
        with open(local_path, "rb") as src, sftp.open(remote_path, "ab" if start else "wb") as dst:
            dst.set_pipelined(True)
            src.seek(start)
            if failpoints.hit("upload-drop", self.name):
                dst.write(src.read(max(1, (os.path.getsize(local_path) - start) // 2)))
                dst.flush()
                self._conn.client.get_transport().sock.close()  # type: ignore[union-attr]
            elif failpoints.hit("upload-corrupt", self.name):
                data = bytearray(src.read())
                data[len(data) // 2] ^= 0xFF
                dst.write(bytes(data))
            shutil.copyfileobj(src, dst, 1 << 20)

    def get(self, remote_path: str, local_path: str) -> None:
        try:
            self._connection().get(remote_path, local_path)
        except (paramiko.SSHException, OSError, EOFError) as e:
            self._drop()
            raise TransportError(f"{self.name}: download of {remote_path} failed: {e}") from e

    def _drop(self) -> None:
        """Forget a connection that failed; closing a dead one may fail too, harmlessly."""
        conn, self._conn = self._conn, None
        if conn is not None:
            with contextlib.suppress(Exception):
                conn.close()

    def close(self) -> None:
        self._drop()
