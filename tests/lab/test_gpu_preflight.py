"""Preflight's GPU check on the lab (issue 27): a host the operator marks as having GPUs
(has_gpu: true, an inventory host var), whose stand-in nvidia-smi says an RTX 5090 on a
driver too old for the release's CUDA 12.8 build and too little GPU memory free, is refused
at preflight with the figures, before anything is stopped (its old daemon still serves, same
pid); the other host rolls."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from .conftest import LabFleet
from .rollout_helpers import (
    FAST_KNOBS,
    CliRun,
    assert_serving,
    daemon_pid,
    fresh_fleet,
    inventory_with,
    lab_playbook_text,
    rollout_args,
    run_cli,
    sh,
)

pytestmark = pytest.mark.lab
GPU_HOST, OTHER = "lab-2", "lab-3"
CUDA_ARGS = 'CUDA_BASE: "nvidia/cuda:12.8.1-devel-ubuntu22.04", CUDA_ARCHS: "120"'


def deploy(work: Path, fleet: LabFleet, version: str, *extra: str) -> CliRun:
    args = rollout_args(fleet.fleet_path, version)
    return run_cli(work, *args, "--limit", f"{GPU_HOST},{OTHER}", "--set",
                   f"lab_knobs={FAST_KNOBS}", *extra)


@pytest.fixture(scope="module")
def fleet(lab_fleet: LabFleet, tmp_path_factory: pytest.TempPathFactory) -> LabFleet:
    base = tmp_path_factory.mktemp("base")
    return fresh_fleet(lab_fleet, [GPU_HOST, OTHER], lambda: deploy(base, lab_fleet, "gpu-base"))


def cuda_playbook(work: Path) -> Path:
    """The lab playbook, its release built with CUDA 12.8 for sm_120 as its manifest records
    (the stand-in's build ignores both arguments)."""
    text = lab_playbook_text()
    args = 'args: {VERSION: "{{ version }}", FAULT: "{{ fault }}"}'
    assert args in text
    path = work / "cuda128.yaml"
    path.write_text(text.replace(args, args[:-1] + f", {CUDA_ARGS}}}"))
    return path


def test_a_host_whose_driver_and_gpu_memory_cannot_run_the_build_is_refused_before_the_stop(
    fleet: LabFleet, tmp_path: Path
) -> None:
    pid = daemon_pid(GPU_HOST)
    assert pid is not None
    gpus = {"gpus": [{"name": "NVIDIA GeForce RTX 5090", "driver": "560.35.05",
                      "compute_cap": "12.0", "total": 32607, "free": 4}],
            "apps": [["GPU-lab-0", pid, 1]]}  # the old daemon holds 1 MiB: freed by the stop
    sh(GPU_HOST, f"mkdir -p /etc/lab && echo '{json.dumps(gpus)}' > /etc/lab/gpus")
    try:
        inventory = inventory_with(tmp_path, fleet.fleet_path, GPU_HOST, "has_gpu: true")
        run = run_cli(tmp_path, "rollout", "--hosts", str(inventory), "--playbook",
                      str(cuda_playbook(tmp_path)), "--set", "version=gpu-new", "--limit",
                      f"{GPU_HOST},{OTHER}", "--set", f"lab_knobs={FAST_KNOBS}", "--set",
                      'serial=["100%"]', "--set", "max_fail_percentage=100")
    finally:
        sh(GPU_HOST, "rm -f /etc/lab/gpus")
    assert run.code == 1, run.stderr[-3000:]
    steps = run.steps(GPU_HOST)
    assert steps["preflight"]["status"] == "failed", steps
    assert "stop" not in steps and "drain" not in steps, steps
    reason = str(steps["preflight"]["reason"])
    assert ("GPU 0 (NVIDIA GeForce RTX 5090) runs driver 560.35.05; the release's CUDA 12.8 "
            "build (nvidia/cuda:12.8.1-devel-ubuntu22.04) needs 570.26 or newer there "
            "(CUDA 12.x: 525.60.13; Blackwell: 570.26)") in reason, reason
    assert ("GPU 0 (NVIDIA GeForce RTX 5090) has 5.0MiB free of 31.8GiB; cuzk needs 12.0MiB "
            "on each GPU") in reason, reason
    assert daemon_pid(GPU_HOST) == pid
    assert assert_serving(GPU_HOST) == "gpu-base"
    assert run.host_end(OTHER)["status"] == "validated", run.host_end(OTHER)
    assert assert_serving(OTHER) == "gpu-new"
