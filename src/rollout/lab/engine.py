"""Make sure a Docker engine answers, starting (and installing) it when we are root."""

from __future__ import annotations

import os
import shutil
import subprocess
import time

import docker
from docker.errors import DockerException

from rollout.errors import EnvironmentProblem

DOCKERD_LOG = "/var/log/rollout-dockerd.log"
START_TIMEOUT_S = 60.0


def _client() -> docker.DockerClient | None:
    try:
        client = docker.from_env(version="auto", timeout=120)
        client.ping()
        return client
    except DockerException:
        return None


def _install_docker_io() -> None:
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    for argv in (["apt-get", "update"], ["apt-get", "install", "-y", "docker.io"]):
        done = subprocess.run(argv, env=env, capture_output=True, text=True, check=False)
        if done.returncode != 0:
            tail = "\n".join(done.stderr.strip().splitlines()[-5:])
            raise EnvironmentProblem(f"installing docker.io failed: {' '.join(argv)}: {tail}")


def _start_dockerd() -> None:
    if shutil.which("dockerd") is None:
        _install_docker_io()
    with open(DOCKERD_LOG, "ab") as log:
        subprocess.Popen(  # noqa: S603 - fixed argv
            ["dockerd"], stdout=log, stderr=subprocess.STDOUT, start_new_session=True
        )


def ensure_engine() -> docker.DockerClient:
    """Return a client of a running engine; start dockerd first if we are root."""
    client = _client()
    if client is not None:
        return client
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
