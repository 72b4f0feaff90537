"""Real and lab kept apart, and the proof parameters checked before anything stops (issue 8):
a user's inventory gets the real cuzk build, the stand-in never runs on a host that is not a
lab host, and missing params fail preflight or are staged, resumably and checksummed."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import pytest

from rollout import lab
from rollout.lab.fleet import HOST_MARKER

from .conftest import POREP_PARAMS, LabFleet
from .rollout_helpers import (
    REPO,
    CliRun,
    assert_serving,
    daemon_pid,
    fresh_fleet,
    inventory_with,
    reset_host,
    rollout_args,
    run_cli,
    sh,
)

pytestmark = pytest.mark.lab
FAST = (
    "--set", "lab_knobs={pool_mib: 32, load_secs: 0.3, drain_mib_per_sec: 256, prove_secs: 0.1}",
    "--set", "ready_timeout=15", "--set", "stop_grace=3", "--set", "drain_deadline=30",
)  # fmt: skip
PARAMS = "/data/zk/params"
VK = POREP_PARAMS.removesuffix(".params") + ".vk"


@pytest.fixture(scope="module")
def fleet(lab_fleet: LabFleet) -> LabFleet:
    return fresh_fleet(lab_fleet, ("lab-1", "lab-2", "lab-3"))


def deploy(
    work: Path, fleet: LabFleet, version: str, *extra: str, env: dict[str, str] | None = None
) -> CliRun:
    return run_cli(work, *rollout_args(fleet.fleet_path, version), *FAST, *extra, env=env)


def users_inventory(work: Path, fleet: LabFleet) -> Path:
    """The lab's hosts in an inventory a user wrote: it names no playbook."""
    path = inventory_with(work, fleet.fleet_path, "lab-1", "gpus: [0]")
    text = "\n".join(ln for ln in path.read_text().splitlines() if not ln.startswith("playbook:"))
    path.write_text(text + "\n")
    return path


def test_a_users_inventory_plans_the_real_cuzk_build_never_the_stand_in(
    fleet: LabFleet, tmp_path: Path
) -> None:
    inventory = users_inventory(tmp_path, fleet)
    checkout = tmp_path / "curio"  # stands for a curio checkout: the build context
    checkout.mkdir()
    for cwd in (REPO, tmp_path):  # ./playbooks/rollout.yaml, then the built-in playbook
        run = run_cli(tmp_path, "rollout", "--hosts", str(inventory), "--dry-run",
                      "--set", f"curio_dir={checkout}", cwd=cwd)
        assert run.code == 0, run.stderr[-2000:]
        assert "would build rollout/cuzk:v1 (cuzk.Dockerfile)" in run.stdout, run.stdout
        assert "rollout-lab" not in run.stdout and "prover" not in run.stdout
    # Without a checkout, the real build is what it fails on (exit 2, naming the key).
    run = run_cli(tmp_path, "rollout", "--hosts", str(inventory), "--dry-run")
    assert run.code == 2 and "build.context: folder not found" in run.stderr, run.stderr


def test_lab_playbook_forced_onto_a_non_lab_host_fails_and_it_keeps_serving(
    fleet: LabFleet, tmp_path: Path
) -> None:
    first = deploy(tmp_path, fleet, "lab-ok", "--limit", "lab-1")
    assert first.code == 0, first.stderr[-3000:]
    pid = daemon_pid("lab-1")
    sh("lab-1", f"mv {HOST_MARKER} {HOST_MARKER}.away")  # now it looks like any rented host
    try:
        run = deploy(tmp_path, fleet, "forced", "--limit", "lab-1", "--playbook",
                     str(REPO / "playbooks" / "lab.yaml"))
        assert run.code == 1
        end = run.host_end("lab-1")
        assert end["status"] != "validated" and "lab playbook runs only on lab hosts" in \
            end["reason"], end
        assert "stop" not in run.steps("lab-1")
        assert daemon_pid("lab-1") == pid
        assert assert_serving("lab-1") == "lab-ok"
        # Without the preflight guard, the stand-in itself refuses to start there.
        unguarded = tmp_path / "unguarded.yaml"
        text = (REPO / "playbooks" / "lab.yaml").read_text()
        text = text.replace("  host_marker: /etc/rollout-lab-host", "  host_marker: null")
        text = text.replace("../dockerfiles", str(REPO / "dockerfiles"))
        text = text.replace(" files/", f" {REPO}/playbooks/files/")
        unguarded.write_text(text)
        run = deploy(tmp_path, fleet, "unguarded", "--limit", "lab-1", "--playbook",
                     str(unguarded))
        assert run.code == 1 and run.host_end("lab-1")["status"] != "validated"
        log = sh("lab-1", "cat /data/rollout/daemon.log")
        assert "LAB STAND-IN" in log and HOST_MARKER in log
    finally:
        sh("lab-1", f"mv {HOST_MARKER}.away {HOST_MARKER}")
        reset_host("lab-1")


def test_missing_params_fail_preflight_before_stop_listing_them(
    fleet: LabFleet, tmp_path: Path
) -> None:
    first = deploy(tmp_path, fleet, "with-params", "--limit", "lab-2")
    assert first.code == 0, first.stderr[-3000:]
    assert "staged" in first.steps("lab-2")["preflight"]["reason"]
    pid = daemon_pid("lab-2")
    sh("lab-2", f"rm -f {PARAMS}/{POREP_PARAMS} {PARAMS}/{VK}")
    run = deploy(tmp_path, fleet, "no-params", "--limit", "lab-2", "--set", "params_source=")
    assert run.code == 1
    end = run.host_end("lab-2")
    preflight = run.steps("lab-2")["preflight"]
    assert preflight["status"] == "failed", preflight
    assert f"{POREP_PARAMS} (missing)" in preflight["reason"]
    assert f"{VK} (missing)" in preflight["reason"]
    assert end["status"] != "validated" and "stop" not in run.steps("lab-2")
    assert daemon_pid("lab-2") == pid
    assert assert_serving("lab-2") == "with-params"  # its SRS was loaded long ago


def test_params_staging_resumes_after_a_dropped_transfer_and_checks_the_digest(
    fleet: LabFleet, tmp_path: Path
) -> None:
    source = tmp_path / "params"
    source.mkdir()
    big = os.urandom(4 << 20)  # small: its page cache counts against the drain (issue 8)
    (source / POREP_PARAMS).write_bytes(big)
    (source / VK).write_bytes(b"vk\n")
    digest = hashlib.sha256(big).hexdigest()
    manifest = (f"[{{name: {POREP_PARAMS}, size: {len(big)}, sha256: {digest}}}, "
                f"{{name: {VK}, size: 3}}]")
    sh("lab-3", f"rm -rf {PARAMS}")
    args = ("--limit", "lab-3", "--set", f"params_files={manifest}",
            "--set", f"params_source={source}")

    dropped = deploy(tmp_path, fleet, "staged", *args,
                     env={"ROLLOUT_FAILPOINTS": "upload-drop@lab-3:1"})
    assert dropped.code == 1
    assert dropped.steps("lab-3")["preflight"]["status"] == "failed"
    assert "stop" not in dropped.steps("lab-3")
    partial = int(sh("lab-3", f"stat -c %s {PARAMS}/{POREP_PARAMS}.partial"))
    assert 0 < partial < len(big)  # the connection really dropped half-way
    assert lab.exec_on("lab-3", f"test -e {PARAMS}/{POREP_PARAMS}")[0] != 0

    resumed = deploy(tmp_path, fleet, "staged", *args)
    assert resumed.code == 0, resumed.stderr[-3000:]
    reason = resumed.steps("lab-3")["preflight"]["reason"]
    assert f"resumed at {partial} bytes" in reason and "sha256 verified" in reason, reason
    on_host = sh("lab-3", f"sha256sum {PARAMS}/{POREP_PARAMS}").split()[0]
    assert on_host == digest
    assert assert_serving("lab-3") == "staged"

    # A partial that is not a prefix of the file fails the digest and is thrown away.
    sh("lab-3", f"rm -f {PARAMS}/{POREP_PARAMS} && head -c 1M /dev/zero > "
                f"{PARAMS}/{POREP_PARAMS}.partial")
    bad = deploy(tmp_path, fleet, "staged-again", *args)
    assert bad.code == 1
    assert "sha256" in bad.steps("lab-3")["preflight"]["reason"]
    assert lab.exec_on("lab-3", f"test -e {PARAMS}/{POREP_PARAMS}.partial")[0] != 0
    assert assert_serving("lab-3") == "staged"
    again = deploy(tmp_path, fleet, "staged-again", *args)
    assert again.code == 0, again.stderr[-3000:]
    reset_host("lab-3")


def test_the_real_fleet_walkthrough(fleet: LabFleet, tmp_path: Path) -> None:
    """docs/real-fleet.md on lab hosts: a user's inventory (SSH port, gpus and gpu_threads
    host vars), the real playbook with only its build swapped for the stand-in's, params
    and C1 staged from local sources, safety_margin and pce_bytes lowered and the proof kind
    the lab's (validate.proof_kind: its params and the budget one proof needs) for a small
    host."""
    inventory = inventory_with(  # lab hosts have no GPU for nvidia-smi to list: has_gpu false
        tmp_path, fleet.fleet_path, "lab-2", "gpus: [0, 1], gpu_threads: 4, has_gpu: false"
    )
    text = "\n".join(ln for ln in inventory.read_text().splitlines()
                     if not ln.startswith("playbook:"))
    inventory.write_text(text + "\n")
    real = (REPO / "playbooks" / "rollout.yaml").read_text()
    head, rest = real.split("\nbuild:\n", 1)
    tag = f"{lab.lab_prefix()}/walk:{{{{ version }}}}"
    build = (f"\nbuild:\n  dockerfile: {REPO}/dockerfiles/lab-prover.Dockerfile\n"
             f"  context: {REPO}/dockerfiles\n  tag: \"{tag}\"\n"
             "  args: {VERSION: \"{{ version }}\"}\n"
             "  image_paths: {cuzk-daemon: /usr/local/bin/cuzk-daemon, "
             "cuzk-bench: /usr/local/bin/cuzk-bench}\n")
    playbook = tmp_path / "rollout.yaml"
    playbook.write_text(head + build + rest[rest.index("\ndaemon:"):])
    c1 = REPO / "playbooks" / "files" / "c1.json"
    run = run_cli(
        tmp_path, "rollout", "--hosts", str(inventory), "--playbook", str(playbook),
        "--limit", "lab-2", "--set", "version=walk-1", "--set", "safety_margin=64MiB",
        "--set", "pce_bytes=16MiB", "--set", "proof_kind=lab-porep",
        "--set", f"params_source={REPO}/playbooks/files/params",
        "--set", f"c1_source={c1}",
        "--set", f"c1_sha256={hashlib.sha256(c1.read_bytes()).hexdigest()}",
    )  # fmt: skip
    assert run.code == 0, run.stderr[-3000:]
    assert run.host_end("lab-2")["status"] == "validated"
    assert "staged" in run.steps("lab-2")["preflight"]["reason"]
    config = sh("lab-2", "cat /data/zk/cuzk.toml")
    assert "devices = [0, 1]" in config and "gpu_threads = 4" in config
    assert 'safety_margin = "64MiB"' in config and "[lab]" not in config
    pid = daemon_pid("lab-2")
    assert "NO_COLOR=1" in sh("lab-2", f"tr '\\0' '\\n' < /proc/{pid}/environ")
    assert "\x1b[" not in sh("lab-2", "cat /data/rollout/daemon.log")
    assert assert_serving("lab-2") == "walk-1"
    reset_host("lab-2")
