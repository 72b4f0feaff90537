"""The lab fleet: local Docker containers that look like rented GPU hosts (see docs/lab.md)."""

from rollout.lab.engine import ensure_engine
from rollout.lab.fleet import (
    BUSY_SIDECAR,
    bench_lab_up,
    down,
    exec_on,
    lab_dir,
    lab_prefix,
    pause_host,
    read_on,
    recreate_host,
    restart_host,
    start_sshd,
    status,
    stop_sshd,
    unpause_host,
    up,
)
from rollout.lab.image import build_prover_image, ensure_base_image, ensure_host_image
from rollout.lab.sidecar import cordoned, set_sidecar, sidecar_events

__all__ = [
    "BUSY_SIDECAR",
    "bench_lab_up",
    "build_prover_image",
    "cordoned",
    "down",
    "ensure_base_image",
    "ensure_engine",
    "ensure_host_image",
    "exec_on",
    "read_on",
    "lab_dir",
    "lab_prefix",
    "pause_host",
    "recreate_host",
    "restart_host",
    "set_sidecar",
    "sidecar_events",
    "start_sshd",
    "status",
    "stop_sshd",
    "unpause_host",
    "up",
]
