"""Make sure a Docker engine answers, starting (and installing) it when we are root."""

from __future__ import annotations

import os
import subprocess
import time

import docker
from docker.errors import DockerException

from rollout.errors import EnvironmentProblem
from rollout.lab.apt import ensure_command

DOCKERD_LOG = "/var/log/rollout-dockerd.log"
START_TIMEOUT_S = 60.0


def _client() -> docker.DockerClient | None:
    try:
        client = docker.from_env(version="auto", timeout=120)
        client.ping()
        return client
    except DockerException:
        return None


def _start_dockerd() -> None:
    ensure_command("dockerd", "docker.io")
    with open(DOCKERD_LOG, "ab") as log:
        subprocess.Popen(  # noqa: S603 - fixed argv
            ["dockerd"], stdout=log, stderr=subprocess.STDOUT, start_new_session=True
        )


def ensure_engine() -> docker.DockerClient:
    """Return a client of a running engine; start dockerd first if we are root."""
    client = _client()
    if client is not None:
        return client
    if os.environ.get("DOCKER_HOST"):
        raise EnvironmentProblem(
            f"the Docker engine at DOCKER_HOST={os.environ['DOCKER_HOST']} does not answer "
            "(rollout starts a local dockerd only when DOCKER_HOST is unset)"
        )
    if os.geteuid() != 0:
        raise EnvironmentProblem(
            "the Docker engine is not running and rollout is not root, so it cannot start it: "
            "start dockerd (e.g. `sudo systemctl start docker`) or set DOCKER_HOST"
        )
    _start_dockerd()
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        client = _client()
        if client is not None:
            return client
        time.sleep(0.5)
    raise EnvironmentProblem(
        f"started dockerd but it did not answer within {START_TIMEOUT_S:.0f} s; see {DOCKERD_LOG}"
    )
