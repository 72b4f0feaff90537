"""`inv lab.*`: the local lab fleet (see docs/lab.md)."""

from __future__ import annotations

from invoke.collection import Collection
from invoke.context import Context
from invoke.tasks import task

from rollout import lab


@task(
    help={
        "hosts": "How many lab hosts to start (default 3).",
        "memory": "Memory limit of each host, Docker syntax: 512m, 2g (default 512m).",
    }
)
def up(c: Context, hosts: int = 3, memory: str = "512m") -> None:
    """Start a fresh lab fleet on the local Docker engine and write lab/fleet.yaml."""
    fleet = lab.up(hosts=hosts, memory=memory)
    print(f"lab fleet of {hosts} host(s) is up; inventory: {fleet}")


@task
def down(c: Context) -> None:
    """Remove every lab container, volume, network and host image tag."""
    lab.down()
    print("lab fleet removed")


@task
def status(c: Context) -> None:
    """List the lab hosts and their state."""
    hosts = lab.status()
    if not hosts:
        print("no lab hosts")
        return
    for host in hosts:
        limit = host["memory_limit"]
        mem = f"{limit // (1 << 20)}MiB" if limit else "-"
        print(f"{host['name']:<10} {host['state']:<10} {host['address']}:{host['port']:<6} {mem}")


ns = Collection("lab", up, down, status)
