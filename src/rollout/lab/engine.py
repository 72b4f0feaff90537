"""Make sure a Docker engine answers, starting (and installing) it when we are root."""

from __future__ import annotations

import os
import subprocess
import time

import docker
from docker.errors import DockerException

from rollout.errors import EnvironmentProblem
from rollout.lab.apt import ensure_command
from rollout.transport.failures import docker_failure

DOCKERD_LOG = "/var/log/rollout-dockerd.log"
START_TIMEOUT_S = 60.0


def _client() -> docker.DockerClient | DockerException:
    """A client of an engine that answers, or why none does."""
    try:
        client = docker.from_env(version="auto", timeout=120)
        client.ping()
        return client
    except DockerException as e:
        return e


def _start_dockerd() -> None:
    ensure_command("dockerd", "docker.io")
    with open(DOCKERD_LOG, "ab") as log:
        subprocess.Popen(  # noqa: S603 - fixed argv
            ["dockerd"], stdout=log, stderr=subprocess.STDOUT, start_new_session=True
        )


def ensure_engine() -> docker.DockerClient:
    """Return a client of a running engine; start dockerd first if we are root."""
    client = _client()
    if not isinstance(client, DockerException):
        return client
    if os.environ.get("DOCKER_HOST") or os.geteuid() != 0:  # rollout starts only its own
        raise docker_failure(EnvironmentProblem, client)
    _start_dockerd()
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        client = _client()
        if not isinstance(client, DockerException):
            return client
        time.sleep(0.5)
    raise EnvironmentProblem(
        f"started dockerd but it did not answer within {START_TIMEOUT_S:.0f} s; see {DOCKERD_LOG}"
    )
