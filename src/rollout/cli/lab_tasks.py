"""`inv lab.*`: the local lab fleet (see docs/lab.md)."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, TypeVar

from invoke.collection import Collection
from invoke.context import Context

from rollout.cli.errors import reports_errors
from rollout.cli.taskdef import task
from rollout.errors import EnvironmentProblem
from rollout.failures import docker_failure

F = TypeVar("F", bound=Callable[..., Any])


def docker_errors(fn: F) -> F:
    """A Docker engine that refuses a request is this machine's problem (exit 3), said in
    one line, not a traceback."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        from docker.errors import DockerException  # Docker only where a lab task runs

        try:
            return fn(*args, **kwargs)
        except DockerException as e:
            detail = getattr(e, "explanation", None)
            if not detail:  # no answer at all: the engine is down
                raise docker_failure(EnvironmentProblem, e) from e
            raise EnvironmentProblem(f"the Docker engine refused: {detail}") from e

    return wrapper  # type: ignore[return-value]


@task(
    help={
        "hosts": "How many lab hosts to start (default 3, at most 64).",
        "memory": "Memory limit of each host, Docker syntax: 512m, 2g (default 512m).",
        "quiet-hosts": "Hosts with no work: no curio-like sidecar submitting proofs (by "
        "default each host's sidecar keeps its daemon busy, as a real host is).",
    }
)
@reports_errors
@docker_errors
def up(c: Context, hosts: int = 3, memory: str = "512m", quiet_hosts: bool = False) -> None:
    """Start a fresh lab fleet on the local Docker engine and write lab/fleet.yaml."""
    from rollout import lab  # the lab (the Docker SDK) only where a lab task runs
    fleet = lab.up(hosts=hosts, memory=memory, busy=not quiet_hosts)
    work = "quiet (no sidecar)" if quiet_hosts else "busy (curio-like sidecar submitting proofs)"
    print(f"lab fleet of {hosts} host(s) is up, {work}; inventory: {fleet}")


@task
@reports_errors
@docker_errors
def down(c: Context) -> None:
    """Remove every lab container, volume, network and host image tag."""
    from rollout import lab  # the lab (the Docker SDK) only where a lab task runs
    lab.down()
    print("lab fleet removed")


@task
@reports_errors
@docker_errors
def status(c: Context) -> None:
    """List the lab hosts and their state."""
    from rollout import lab  # the lab (the Docker SDK) only where a lab task runs
    hosts = lab.status()
    if not hosts:
        print("no lab hosts")
        return
    for host in hosts:
        limit = host["memory_limit"]
        mem = f"{limit // (1 << 20)}MiB" if limit else "-"
        print(f"{host['name']:<10} {host['state']:<10} {host['address']}:{host['port']:<6} {mem}")


ns = Collection("lab", up, down, status)
