"""Bring the lab fleet up and down, and poke at its hosts (for tests and fault drills)."""

from __future__ import annotations

import contextlib
import io
import json
import os
import re
import socket
import tarfile
import threading
import time
import uuid
import zlib
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import docker
from docker.errors import APIError, NotFound
from docker.models.containers import Container
from docker.utils import parse_bytes
from tenacity import RetryError, Retrying, retry_if_exception, stop_after_attempt, wait_exponential

from rollout.config.playbook import LAB_PLAYBOOK
from rollout.errors import EnvironmentProblem, TransportError, UserError
from rollout.lab.engine import ensure_engine
from rollout.lab.image import HOST_REPO, ensure_host_image
from rollout.lab.keys import HostKey, ensure_client_key, known_hosts_line, new_host_key

LABEL = "rollout.lab"
DEFAULT_PREFIX = "rollout-lab"
ADDRESS = "127.0.0.1"
FIRST_PORT = 22001
SSH_WAIT_S = 30.0
MAX_HOSTS = 64
FREEZE_ATTEMPTS = 20  # pause: how often a freeze that did not settle is tried (see below)
SSHD_STOPPED_FLAG = "/run/lab-sshd-stopped"  # lab-init does not restart sshd while it exists
HOST_MARKER = "/etc/rollout-lab-host"
"""Only lab hosts have this file: the lab playbook's preflight and the stand-in itself refuse
any host without it, so the stand-in can never replace a real prover."""
SIDECAR_SETTINGS = "/etc/rollout-lab-curio.json"  # while it exists lab-init runs `curio run`
BUSY_SIDECAR: dict[str, Any] = {"pause_secs": 0.5, "concurrency": 1, "hold_mib": 5}
"""What each host's curio-like sidecar does in a lab fleet brought up busy (the default), as a
real host is busy: one proof at a time (as long as the daemon's prove_secs: 1 s with the lab
playbook's knobs, so a proof is in flight two thirds of the time), half a second's pause
between two, and 5 MiB held beside the daemon (curio's 5 GiB at the lab's 1/1024)."""


def lab_prefix() -> str:
    """Names of this lab's containers, volumes and network: $ROLLOUT_LAB_PREFIX, else
    rollout-lab. Two labs with different prefixes run side by side on one engine."""
    prefix = os.environ.get("ROLLOUT_LAB_PREFIX") or DEFAULT_PREFIX
    if not re.fullmatch(r"[a-z0-9][a-z0-9-]{0,30}", prefix):
        raise UserError(f"ROLLOUT_LAB_PREFIX {prefix!r}: use lowercase letters, digits and -")
    return prefix


def _label_filter() -> dict[str, str]:
    return {"label": f"{LABEL}={lab_prefix()}"}


@dataclass(frozen=True)
class LabHost:
    name: str
    port: int
    memory: str
    data_size: str | None = None  # a size-limited tmpfs /data (a disk that fills up)

    @property
    def container(self) -> str:
        return f"{lab_prefix()}-{self.name}"

    @property
    def volume(self) -> str:
        return f"{lab_prefix()}-{self.name}-data"


def lab_dir() -> Path:
    """Where the lab keeps its inventory and keys: $ROLLOUT_LAB_DIR, else ./lab."""
    return Path(os.environ.get("ROLLOUT_LAB_DIR") or Path.cwd() / "lab").absolute()


# -- ports, files --------------------------------------------------------------------------
def _port_is_free(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        try:
            sock.bind((ADDRESS, port))
        except OSError:
            return False
    return True


def _first_port() -> int:
    """Labs with other prefixes start elsewhere, so two coming up at once never race."""
    prefix = lab_prefix()
    return FIRST_PORT if prefix == DEFAULT_PREFIX else FIRST_PORT + 200 * (zlib.crc32(
        prefix.encode()) % 150)


def free_odd_ports(count: int, start: int | None = None) -> list[int]:
    ports: list[int] = []
    port = (start or _first_port()) | 1
    while len(ports) < count:
        if port > 65535:
            raise EnvironmentProblem(f"no {count} free odd ports on {ADDRESS} from {start}")
        if _port_is_free(port):
            ports.append(port)
        port += 2
    return ports


def _write_atomic(path: Path, text: str) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text)
    tmp.replace(path)


def inventory_text(hosts: Sequence[LabHost]) -> str:
    lines = [
        "# Lab fleet written by `inv lab.up`.",
        "# It names the lab playbook (the stand-in build); an inventory of your own names none",
        "# and gets the real cuzk playbook.",
        f"playbook: {LAB_PLAYBOOK}",
        "defaults:",
        "  user: root",
        "  key_file: keys/id_ed25519",
        "  known_hosts: known_hosts",
        "  host_key_policy: strict",
        "hosts:",
    ]
    for host in hosts:
        lines += [
            f"  - name: {host.name}",
            f"    address: {ADDRESS}",
            f"    port: {host.port}",
            "    groups: [lab]",
            f"    vars: {{memory_limit: {host.memory}}}",
        ]
    return "\n".join(lines) + "\n"


def _secrets_tar(key: HostKey, authorized_key: str, sidecar: bytes | None) -> bytes:
    """The files a host starts with; `sidecar`: the sidecar's settings (None: no sidecar)."""
    files = [
        (HOST_MARKER.lstrip("/"), f"{lab_prefix()}\n".encode(), 0o644),
        ("root/.ssh/authorized_keys", authorized_key.encode(), 0o600),
        ("etc/ssh/ssh_host_ed25519_key", key.private, 0o600),
        ("etc/ssh/ssh_host_ed25519_key.pub", key.public.encode() + b"\n", 0o644),
    ]
    if sidecar is not None:
        files.append((SIDECAR_SETTINGS.lstrip("/"), sidecar, 0o644))
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for path, data, mode in files:
            info = tarfile.TarInfo(path)
            info.size, info.mode = len(data), mode
            tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


# -- containers ----------------------------------------------------------------------------
def _remove_leftovers(client: docker.DockerClient) -> None:
    for container in client.containers.list(all=True, filters=_label_filter()):
        container.remove(force=True, v=True)
    for volume in client.volumes.list(filters=_label_filter()):
        volume.remove(force=True)
    for network in client.networks.list(filters=_label_filter()):  # names= matches prefixes:
        network.remove()  # rl-i10 would take rl-i10b's network too


def _start_host(
    client: docker.DockerClient, image: str, host: LabHost, index: int, authorized_key: str,
    sidecar: bytes | None,
) -> HostKey:
    key = new_host_key(host.name)
    labels = {LABEL: lab_prefix(), f"{LABEL}.name": host.name, f"{LABEL}.index": str(index)}
    # mode 0755 as a disk's /data is: tmpfs's own default (1777) is refused by preflight
    opts = ({"type": "tmpfs", "device": "tmpfs", "o": f"size={host.data_size},mode=0755"}
            if host.data_size else None)
    client.volumes.create(host.volume, labels=labels, driver_opts=opts)
    container = client.containers.create(
        image, name=host.container, hostname=host.name, labels=labels, detach=True,
        mem_limit=host.memory, memswap_limit=host.memory, shm_size=host.memory,
        ports={"22/tcp": (ADDRESS, host.port)}, network=lab_prefix(),
        volumes={host.volume: {"bind": "/data", "mode": "rw"}},
    )  # fmt: skip
    container.put_archive("/", _secrets_tar(key, authorized_key, sidecar))
    container.start()
    return key


def wait_for_ssh(port: int, timeout: float = SSH_WAIT_S) -> None:
    """Wait until sshd itself answers (docker-proxy accepts before sshd listens)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with socket.create_connection((ADDRESS, port), timeout=2) as sock:
                if sock.recv(4).startswith(b"SSH-"):
                    return
        except OSError:
            pass
        time.sleep(0.1)
    raise TransportError(f"lab sshd on {ADDRESS}:{port} did not answer within {timeout:.0f} s")


def up(hosts: int = 3, memory: str = "512m", busy: bool = True) -> Path:
    """Start `hosts` fresh lab hosts and write `<lab dir>/fleet.yaml`; return its path.
    `busy`: each host's curio-like sidecar submits proofs from the start (BUSY_SIDECAR), as
    a real host is busy; False: quiet hosts, no sidecar until `set_sidecar` starts one."""
    if not 1 <= hosts <= MAX_HOSTS:
        raise UserError(f"--hosts must be between 1 and {MAX_HOSTS}, got {hosts}")
    try:
        parse_bytes(memory)
    except docker.errors.DockerException as exc:
        raise UserError(f"--memory {memory!r} is not a size like 512m or 2g") from exc
    client = ensure_engine()
    image = ensure_host_image(client)
    _remove_leftovers(client)
    client.networks.create(lab_prefix(), driver="bridge", labels={LABEL: lab_prefix()})
    lab = lab_dir()
    authorized = ensure_client_key(lab).with_suffix(".pub").read_text()
    planned = [
        LabHost(f"lab-{i}", port, memory) for i, port in enumerate(free_odd_ports(hosts), 1)
    ]
    sidecar = json.dumps(BUSY_SIDECAR).encode() if busy else None
    with ThreadPoolExecutor(max_workers=min(8, hosts)) as pool:
        keys = list(
            pool.map(lambda h: _start_host(client, image, h[1], h[0], authorized, sidecar),
                     enumerate(planned, 1))
        )  # fmt: skip
        list(pool.map(lambda h: wait_for_ssh(h.port), planned))
    known = [known_hosts_line(ADDRESS, h.port, k) for h, k in zip(planned, keys, strict=True)]
    _write_atomic(lab / "known_hosts", "\n".join(known) + "\n")
    fleet = lab / "fleet.yaml"
    _write_atomic(fleet, inventory_text(planned))
    return fleet


def down() -> None:
    """Remove every container, volume, network and host image tag the lab created."""
    client = ensure_engine()
    _remove_leftovers(client)
    # sparse: no inspect per container, which fails when another lab removes one meanwhile
    if client.containers.list(all=True, filters={"label": LABEL}, sparse=True):
        return _forget_lab_files()  # another lab (another prefix) still uses the host image
    for image in client.images.list(name=HOST_REPO):
        for tag in image.tags:
            if tag.startswith(HOST_REPO + ":"):
                client.images.remove(tag, noprune=False)
    _forget_lab_files()


def _forget_lab_files() -> None:
    lab = lab_dir()
    for name in ("fleet.yaml", "known_hosts"):
        (lab / name).unlink(missing_ok=True)


def _describe(container: Container) -> dict[str, Any]:
    labels = container.labels
    bindings = container.attrs["HostConfig"].get("PortBindings") or {}
    port = (bindings.get("22/tcp") or [{}])[0].get("HostPort")
    return {
        "name": labels.get(f"{LABEL}.name", container.name),
        "container": container.name,
        "state": container.status,
        "address": ADDRESS,
        "port": int(port) if port else None,
        "memory_limit": container.attrs["HostConfig"].get("Memory") or None,
        "index": int(labels.get(f"{LABEL}.index", "0")),
    }


def status() -> list[dict[str, Any]]:
    """One dict per lab host: name, container, state, address, port, memory_limit."""
    client = ensure_engine()
    found = client.containers.list(all=True, filters=_label_filter())
    return sorted((_describe(c) for c in found), key=lambda d: (d["index"], d["name"]))


# -- poking at one host --------------------------------------------------------------------
def _container(name: str) -> Container:
    client = ensure_engine()
    prefix = lab_prefix()
    cname = name if name.startswith(f"{prefix}-") else f"{prefix}-{name}"
    try:
        return client.containers.get(cname)
    except NotFound as exc:
        raise UserError(f"no lab host {name!r} (is the lab up?)") from exc


EXEC_POLL_S = 0.02


def exec_on(
    name: str, cmd: str | Sequence[str], environment: dict[str, str] | None = None
) -> tuple[int, str]:
    """Run `cmd` (a shell string or an argv) on a lab host with docker exec; its exit status
    and its output (stdout and stderr together).

    Like a command run over SSH, it runs with oom_score_adj 500 (see lab-init). The output
    goes to a file in the container, read back once the command has exited: an attached
    exec's stream sometimes comes back empty though the command printed (about 1 in 1500
    under load here; docker/docker-py#2042), which made a file read back as empty.
    """
    reset = "echo 500 > /proc/self/oom_score_adj; "
    if isinstance(cmd, str):
        argv = ["/bin/sh", "-c", reset + cmd]
    else:
        argv = ["/bin/sh", "-c", reset + 'exec "$@"', "sh", *cmd]
    code, output = exec_in(_container(name), argv, environment)
    return code, output.decode(errors="replace")


def exec_in(
    container: Container, argv: list[str], environment: dict[str, str] | None = None
) -> tuple[int, bytes]:
    """docker exec of `argv` (whose first two words are a shell and -c) in `container`,
    its output sent to a file there and read back once it has exited (see exec_on). The
    files already read are removed by the next exec in that container."""
    out = f"/tmp/.lab-exec-{uuid.uuid4().hex}"
    with _READ_LOCK:
        done = _READ.pop(container.id, [])
    tidy = f"rm -f {' '.join(done)}; " if done else ""
    argv = [argv[0], argv[1], f"{tidy}exec > {out} 2>&1; " + argv[2], *argv[3:]]
    api = container.client.api
    exec_id = api.exec_create(container.id, argv, environment=environment)["Id"]
    api.exec_start(exec_id, detach=True)
    code = _exit_code(api, exec_id)
    output = _read_file(container, out)
    with _READ_LOCK:
        _READ.setdefault(container.id, []).append(out)
    return code, output


_READ: dict[str, list[str]] = {}  # per container: output files read, for the next exec to remove
_READ_LOCK = threading.Lock()


def _exit_code(api: Any, exec_id: str) -> int:
    """Wait for a detached exec to end (its state, polled) and return its exit status."""
    while True:
        info = api.exec_inspect(exec_id)
        if not info.get("Running") and info.get("ExitCode") is not None:
            return int(info["ExitCode"])
        time.sleep(EXEC_POLL_S)


def read_on(name: str, path: str) -> str:
    """A file on a lab host ("" when it is missing), read through the archive API: no
    process starts in the host, so nothing allocates in its cgroup. A docker exec into a
    host at its memory limit makes the OOM killer strike, sometimes twice in a row (the
    daemon, then a session or sshd), as a login on a rented host would."""
    return _read_file(_container(name), path).decode(errors="replace")


def _read_file(container: Container, path: str) -> bytes:
    """A file's bytes from the container, through the archive API (no exec stream)."""
    try:
        stream, _ = container.get_archive(path)
    except NotFound:
        return b""  # the shell could not even open it: nothing was printed
    with tarfile.open(fileobj=io.BytesIO(b"".join(stream))) as tar:
        member = tar.next()
        data = tar.extractfile(member) if member is not None else None
        return data.read() if data is not None else b""


def restart_host(name: str) -> None:
    """Restart a host's container (its /data volume survives) and wait for its sshd."""
    container = _container(name)
    container.restart(timeout=5)
    container.reload()
    port = _describe(container)["port"]
    if port:
        wait_for_ssh(port)


def recreate_host(name: str, data_size: str | None = None,
                  update_known_hosts: bool = True) -> None:
    """Replace a host by a new container with a new host key and an empty /data, on the
    same port: what a provider does when an instance is recreated. `data_size` gives it a
    small /data that can fill up. Without `update_known_hosts` the old key stays trusted.
    Its sidecar runs as the old one's did (the same settings, or none)."""
    client = ensure_engine()
    old = _describe(_container(name))
    sidecar = _read_file(_container(name), SIDECAR_SETTINGS) or None
    _container(name).remove(force=True, v=True)
    host = LabHost(name, int(old["port"]), str(old["memory_limit"]), data_size)
    with contextlib.suppress(NotFound):
        client.volumes.get(host.volume).remove(force=True)
    authorized = ensure_client_key(lab_dir()).with_suffix(".pub").read_text()
    key = _start_host(client, ensure_host_image(client), host, int(old["index"]), authorized,
                      sidecar)
    wait_for_ssh(host.port)
    if update_known_hosts:
        known = lab_dir() / "known_hosts"
        prefix = f"[{ADDRESS}]:{host.port} "
        lines = [ln for ln in known.read_text().splitlines() if not ln.startswith(prefix)]
        lines.append(known_hosts_line(ADDRESS, host.port, key))
        _write_atomic(known, "\n".join(lines) + "\n")


def pause_host(name: str) -> None:
    """Freeze every process of a host: SSH connects but never answers (a hung host)."""
    pause_container(_container(name))


def pause_container(container: Container, sleep: Callable[[float], None] = time.sleep) -> None:
    """Docker's pause, tried again while the cgroup freezer cannot settle: on a loaded
    machine runc gives up ("unable to freeze") and thaws the container again. Returns
    once Docker reports it paused; other errors go up at once; after FREEZE_ATTEMPTS an
    EnvironmentProblem."""
    retrying = Retrying(
        stop=stop_after_attempt(FREEZE_ATTEMPTS), sleep=sleep,
        wait=wait_exponential(multiplier=0.05, max=1.0),
        retry=retry_if_exception(_freeze_failed),
    )  # fmt: skip
    try:
        retrying(_pause_once, container)
    except RetryError as exc:
        raise EnvironmentProblem(
            f"could not pause lab container {container.name}: the cgroup freezer did not "
            f"settle in {FREEZE_ATTEMPTS} tries: {exc.last_attempt.exception()}"
        ) from None


def _pause_once(container: Container) -> None:
    try:
        container.pause()
    except APIError:
        container.reload()
        if container.status != "paused":  # a failed freeze that did settle after all
            raise


def _freeze_failed(exc: BaseException) -> bool:
    return isinstance(exc, APIError) and "unable to freeze" in str(exc)


def unpause_host(name: str) -> None:
    _container(name).unpause()


def stop_sshd(name: str) -> None:
    """Kill a host's sshd (the container keeps running): connections are refused/reset.
    Returns once no sshd process is left."""
    code, out = exec_on(name, f"touch {SSHD_STOPPED_FLAG}; pkill -KILL -x sshd; "
                              "for i in $(seq 600); do pgrep -x sshd >/dev/null || exit 0; "
                              "sleep 0.05; done; exit 1")  # fmt: skip
    if code != 0:
        raise EnvironmentProblem(f"sshd on {name} did not go away: {out.strip()}")


def start_sshd(name: str) -> None:
    container = _container(name)
    code, out = exec_on(name, f"rm -f {SSHD_STOPPED_FLAG}; pgrep -x sshd || /usr/sbin/sshd")
    if code != 0:
        raise EnvironmentProblem(f"could not start sshd on {name}: {out.strip()}")
    container.reload()
    port = _describe(container)["port"]
    if port:
        wait_for_ssh(port)


def bench_lab_up(hosts: int = 8) -> float:
    """Seconds `up(hosts)` takes once the base image is cached. Replaces any running lab."""
    ensure_host_image(ensure_engine())
    started = time.monotonic()
    up(hosts)
    elapsed = time.monotonic() - started
    down()
    return elapsed


