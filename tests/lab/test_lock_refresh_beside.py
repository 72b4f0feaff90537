"""A run's lock stays fresh while its host's step waits on a long call: the validation proof
(up to 1,200 s) and the drain outlast `lock_stale_after` (300 s), and the host's agent runs
one command at a time, so the heartbeat's refresh goes on an SSH channel of its own."""

from __future__ import annotations

import threading

import pytest

from rollout.config.inventory import load_inventory
from rollout.config.playbook import LAB_PLAYBOOK
from rollout.engine.locks import (
    LockPolicy,
    holder_for,
    refresh_host_lock,
    release_host_lock,
    take_host_lock,
)
from rollout.host.layout import Layout
from rollout.steps.base import HostContext
from rollout.steps.kinds import load_playbook
from rollout.transport.ssh import SshTransport

from .conftest import LabFleet
from .rollout_helpers import poll, reset_host, sh

pytestmark = pytest.mark.lab
HOST = "lab-3"


def test_a_refresh_does_not_wait_for_the_step_under_way(lab_fleet: LabFleet) -> None:
    """The step's command holds the agent until let go; meanwhile a refresh answers, and the
    lock's heartbeat on the host (the file's mtime) is new, while that command still runs."""
    reset_host(HOST)
    host = load_inventory(lab_fleet.fleet_path).get(HOST)
    settings = load_playbook(LAB_PLAYBOOK).for_host(host)
    ctx = HostContext(host, SshTransport(host), Layout(settings.release.root), settings)
    me = holder_for("beside-run", "op", "ctl", "test")
    take_host_lock(ctx, me, LockPolicy(), lambda found: None)
    wait = "touch /tmp/busy; while [ ! -e /tmp/let-go ]; do sleep 0.1; done"
    step = threading.Thread(target=ctx.transport.run, args=(wait, 300), daemon=True)
    refreshed: list[object] = []
    beside = threading.Thread(target=lambda: refreshed.append(refresh_host_lock(ctx, me)),
                              daemon=True)
    try:
        sh(HOST, "rm -f /tmp/busy /tmp/let-go && touch -d '2 hours ago' /data/rollout/lock")
        step.start()
        poll(HOST, "test -e /tmp/busy")
        beside.start()
        beside.join(120)
        assert refreshed == [None], "the refresh waited for the step's command"
        assert step.is_alive()
        assert sh(HOST, "find /data/rollout/lock -mmin -5").strip() == "/data/rollout/lock"
    finally:
        sh(HOST, "touch /tmp/let-go")
        step.join(60)
        release_host_lock(ctx, me)
        ctx.transport.close()
        sh(HOST, "rm -f /tmp/busy /tmp/let-go")
    assert not step.is_alive()
