"""Real, small objects for the unit tests that need a step context: a Host, and the lab
playbook rendered for it (the settings a step reads), instead of None or a namespace."""

from __future__ import annotations

from collections.abc import Callable
from functools import cache
from pathlib import Path
from typing import Any

from rollout.config.inventory import Host
from rollout.config.playbook import LAB_PLAYBOOK, Playbook, load_playbook, parse_set_options
from rollout.host.layout import Layout
from rollout.steps.base import HostContext
from rollout.steps.decision import Release
from rollout.transport.base import Transport
from rollout.transport.local import LocalTransport


def small_host(name: str = "h1", address: str = "127.0.0.1", port: int = 22,
               **host_vars: Any) -> Host:
    return Host(name, address, port, "root", None, Path("/k"), "strict", 10, (), host_vars)


@cache
def lab_playbook() -> Playbook:
    """The lab playbook, without params (there are none on a unit test's host)."""
    return load_playbook(LAB_PLAYBOOK, overrides=parse_set_options(("params_files=[]",
                                                                    "pce_bytes=0")))


@cache
def settings_for(host: Host) -> Playbook:
    return lab_playbook().for_host(host)


def host_context(host: Host | None = None, transport: Transport | None = None,
                 layout: Layout | None = None,
                 emit: Callable[..., object] | None = None,
                 release: Release | None = None) -> HostContext:
    """A step context on a real (small) host with the lab playbook's settings; a local
    transport and the default layout unless given."""
    host = host or small_host()
    return HostContext(host, transport or LocalTransport(host.name), layout or Layout(),
                       settings_for(host), release, emit=emit)
