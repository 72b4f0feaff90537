"""Fixtures of the lab tests: one lab fleet per session, the stand-in prover image, and a
helper that installs and drives the stand-in cuzk on a lab host (through docker exec)."""

from __future__ import annotations

import io
import json
import re
import shlex
import tarfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import docker
import pytest

from rollout import lab
from rollout.errors import EnvironmentProblem

from .rollout_helpers import kill_and_wait

PROVER_TAG = f"{lab.lab_prefix()}/prover:test-v1"
PROVER_VERSION = "test-v1"
ZK = "/data/zk"
CONFIG = f"{ZK}/cuzk.toml"
LOG = f"{ZK}/daemon.log"
LISTEN = "127.0.0.1:9820"
STATUS = "127.0.0.1:9821"
# Small and fast, so the whole lab run stays short on two cores.
FAST = {"pool_mib": 32, "load_secs": 0.5, "drain_mib_per_sec": 64, "prove_secs": 0.2,
        "bind_delay_secs": 0.3}
PARAMS = f"{ZK}/params"
# cuzk's file name for the PoRep 32 GiB SRS; the stand-in reads it at its first proof.
POREP_PARAMS = ("v28-stacked-proof-of-replication-merkletree-poseidon_hasher-8-8-0-sha256_hasher-"
                "82a357d2f2ca81dc61bb45f4a762807aedee1b0a53fd6c4e77b46a01bfef7820.params")
ANSI = re.compile(r"\x1b\[[0-9;]*m")


@dataclass
class FleetHost:
    name: str
    port: int


@dataclass
class LabFleet:
    fleet_path: Path
    hosts: list[FleetHost] = field(default_factory=list)

    def refresh(self, fleet_path: Path) -> None:
        self.fleet_path = fleet_path
        self.hosts = [FleetHost(h["name"], h["port"]) for h in lab.status()]


@pytest.fixture(scope="session")
def docker_client() -> docker.DockerClient:
    try:
        return lab.ensure_engine()
    except EnvironmentProblem as exc:
        pytest.skip(f"no Docker engine for the lab: {exc}")


@pytest.fixture(scope="session")
def lab_fleet(docker_client: docker.DockerClient) -> Iterator[LabFleet]:
    fleet = LabFleet(lab.up(3))  # busy, as `rollout lab.up` brings it up: every host's sidecar
    fleet.refresh(fleet.fleet_path)
    yield fleet
    lab.down()


@pytest.fixture(scope="session")
def prover_image(docker_client: docker.DockerClient) -> Iterator[str]:
    tag = lab.build_prover_image(docker_client, PROVER_TAG, PROVER_VERSION)
    yield tag
    docker_client.images.remove(tag, force=True)


def extract_standin(client: docker.DockerClient, image: str) -> dict[str, bytes]:
    """The real flow: docker create, then copy the executables out of the image."""
    container = client.containers.create(image, command=["true"])
    try:
        out: dict[str, bytes] = {}
        for name in ("cuzk-daemon", "cuzk-bench"):
            stream, _ = container.get_archive(f"/usr/local/bin/{name}")
            out[name] = b"".join(stream)
        return out
    finally:
        container.remove(force=True)


class Standin:
    """Drives the stand-in cuzk on one lab host. Binaries live in /data/bin, like on a
    rented host whose /usr/local/bin is not writable."""

    def __init__(self, client: docker.DockerClient, host: str) -> None:
        self.client = client
        self.host = host

    def sh(self, cmd: str) -> tuple[int, str]:
        return lab.exec_on(self.host, cmd)

    def ok(self, cmd: str) -> str:
        code, out = self.sh(cmd)
        assert code == 0, f"`{cmd}` exited {code}: {out}"
        return out

    def install(self, archives: dict[str, bytes]) -> None:
        self.ok("mkdir -p /data/bin")
        container = self.client.containers.get(f"{lab.lab_prefix()}-{self.host}")
        for tar in archives.values():
            container.put_archive("/data/bin", tar)

    def put(self, path: str, data: bytes, mode: int = 0o644) -> None:
        """A file on the host, written through the archive API (its folder made first)."""
        folder, _, name = path.rpartition("/")
        self.ok(f"mkdir -p {shlex.quote(folder or '/')}")
        buf = io.BytesIO()
        with tarfile.open(fileobj=buf, mode="w") as tar:
            info = tarfile.TarInfo(name)
            info.size, info.mode, info.mtime = len(data), mode, int(time.time())
            tar.addfile(info, io.BytesIO(data))
        container = self.client.containers.get(f"{lab.lab_prefix()}-{self.host}")
        container.put_archive(folder or "/", buf.getvalue())

    def make_params(self, mib: int = 1) -> None:
        """The SRS params file the daemon mmaps at its first proof."""
        self.ok(f"mkdir -p {PARAMS} && head -c {mib}M /dev/urandom > {PARAMS}/{POREP_PARAMS}")

    def write_config(self, knobs: dict[str, Any] | None = None, budget: str = "auto") -> None:
        lines = [
            "[daemon]", f'listen = "{LISTEN}"', f'status_listen = "{STATUS}"',
            "[memory]", f'total_budget = "{budget}"', 'safety_margin = "16MiB"',
            "[srs]", f'param_cache = "{ZK}/params"', "[lab]",
        ]  # fmt: skip
        lines += [f"{k} = {json.dumps(v)}" for k, v in {**FAST, **(knobs or {})}.items()]
        self.ok(f"mkdir -p {ZK} && printf '%s\\n' {' '.join(map(shlex.quote, lines))} > {CONFIG}")

    def start(
        self,
        knobs: dict[str, Any] | None = None,
        env: dict[str, str] | None = None,
        reaper_delay: float | None = None,
    ) -> None:
        """Start the daemon in the background, detached from this exec, logs to LOG."""
        self.write_config(knobs)
        envs = " ".join(f"{k}={shlex.quote(v)}" for k, v in (env or {}).items())
        cmd = f"env {envs} /data/bin/cuzk-daemon -c {CONFIG}"
        if reaper_delay is not None:
            cmd = f"lab-late-reaper {reaper_delay} -- {cmd}"
        inner = f"{cmd} > {LOG} 2>&1; echo $? > {ZK}/exit.rc"
        self.ok(f"rm -f {ZK}/exit.rc; cd {ZK} && nohup sh -c {shlex.quote(inner)} "
                "< /dev/null > /dev/null 2>&1 &")

    def pid(self) -> int | None:
        code, out = self.sh("pgrep -x cuzk-daemon")
        return int(out.split()[0]) if code == 0 else None

    def wait_pid(self, timeout: float = 5.0) -> int:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            pid = self.pid()
            if pid:
                return pid
            time.sleep(0.05)
        raise AssertionError(f"no cuzk-daemon on {self.host}; log:\n{self.log()}")

    def state(self, pid: int) -> str | None:
        code, out = self.sh(f"cat /proc/{pid}/stat")
        return out.rsplit(")", 1)[1].split()[0] if code == 0 else None

    def status(self, path: str = "/status") -> tuple[int, dict[str, Any] | None]:
        code, out = self.sh(f"curl -s -w '\\n%{{http_code}}' http://{STATUS}{path}")
        if code != 0:
            return 0, None
        body, _, http = out.rpartition("\n")
        return int(http), (json.loads(body) if body.startswith("{") else None)

    def grpc_bound(self) -> bool:
        """The gRPC port accepts connections (curl exit 7: refused)."""
        return self.sh(f"curl -s --max-time 1 -o /dev/null http://{LISTEN}/")[0] != 7

    def wait_ready(self, timeout: float = 10.0) -> dict[str, Any]:
        """Both ports answer: like cuzk, the stand-in binds the status port first."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            http, body = self.status()
            if http == 200 and body and self.grpc_bound():
                return body
            time.sleep(0.1)
        raise AssertionError(f"daemon on {self.host} never answered; log:\n{self.log()}")

    def bench(self, args: str) -> tuple[int, str]:
        return self.sh(f"/data/bin/cuzk-bench {args} 2>&1")

    def raw_log(self) -> str:
        return self.sh(f"cat {LOG}")[1]

    def log(self) -> str:
        """The daemon's log without its ANSI colour codes."""
        return ANSI.sub("", self.raw_log())

    def exit_rc(self, timeout: float = 10.0) -> int:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            # read without an exec: one into a host at its memory limit makes the OOM
            # killer strike, sometimes twice (the daemon, then sshd)
            out = lab.read_on(self.host, f"{ZK}/exit.rc")
            if out.strip():
                return int(out)
            time.sleep(0.1)
        raise AssertionError(f"daemon on {self.host} did not exit; log:\n{self.log()}")

    def memory_usage(self) -> int:
        return int(self.ok("cat /sys/fs/cgroup/memory/memory.usage_in_bytes "
                           "2>/dev/null || cat /sys/fs/cgroup/memory.current"))

    def pool_files(self) -> list[str]:
        return self.sh("ls /dev/shm")[1].split()

    def cleanup(self) -> None:
        """Kill every process but PID 1, sshd and this shell (daemons, keepers, reapers,
        anything a rollout test left behind), then free the pool and our files."""
        others = ("ps -eo pid=,comm= | awk -v me=$$ "
                  "'$1 != 1 && $1 != me && $2 != \"sshd\" {print $1}'")
        self.ok(f"{kill_and_wait(others)} && rm -rf /dev/shm/lab-srs-pool.* {ZK} /run/curio")


@pytest.fixture(scope="session")
def standin_archives(docker_client: docker.DockerClient, prover_image: str) -> dict[str, bytes]:
    return extract_standin(docker_client, prover_image)


@pytest.fixture
def standin(
    docker_client: docker.DockerClient, lab_fleet: LabFleet, standin_archives: dict[str, bytes]
) -> Iterator[Standin]:
    """The stand-in installed on a lab host, cleaned up (daemon, keeper, pool) afterwards.
    The host is quiet meanwhile: these tests drive a daemon by hand at the sidecar's address
    and count its proofs, memory and pool; its busy sidecar runs again afterwards."""
    helper = Standin(docker_client, lab_fleet.hosts[0].name)
    lab.set_sidecar(helper.host, None)
    helper.cleanup()
    helper.install(standin_archives)
    yield helper
    helper.cleanup()
    lab.set_sidecar(helper.host, lab.BUSY_SIDECAR)
