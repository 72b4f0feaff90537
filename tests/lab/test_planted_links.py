"""No write leaves /data (issue 18): a symbolic link planted in place of each file or folder
rollout writes under /data, pointing outside it (a file under /etc, a folder under /tmp, with
known content), a /data others may write, a supervisor.py that is not root's: the host is
refused at preflight with the reason, before anything changes; the targets are unchanged and
the old daemon keeps serving. A lock file that is a link or not JSON is never read out."""

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
    rollout_args,
    run_cli,
    sh,
)

pytestmark = pytest.mark.lab
HOST = "lab-2"
CANARY = "/etc/rollout-canary"  # a file rollout must never write: root's, 0640
CANARY_DIR = "/tmp/rollout-canary.d"  # a folder rollout must never write into
SECRET = "CANARY-h-fls-must-never-be-echoed"


@pytest.fixture(scope="module")
def fleet(lab_fleet: LabFleet, tmp_path_factory: pytest.TempPathFactory) -> LabFleet:
    base = tmp_path_factory.mktemp("base")
    fleet = fresh_fleet(lab_fleet, [HOST], lambda: deploy(base, lab_fleet, "links-base"))
    sh(HOST, f"printf '%s\\n' {SECRET} > {CANARY} && chmod 0640 {CANARY} && "
             f"rm -rf {CANARY_DIR} && mkdir -p {CANARY_DIR} && echo keep > {CANARY_DIR}/keep")
    return fleet


def deploy(work: Path, fleet: LabFleet, version: str, *extra: str) -> CliRun:
    args = rollout_args(fleet.fleet_path, version)
    return run_cli(work, *args, "--limit", HOST, "--set", f"lab_knobs={FAST_KNOBS}", *extra)


def targets() -> str:
    """What the links point at, as it is: the canary's bytes and mode, the folder's files."""
    return sh(HOST, f"stat -c '%a %U %s' {CANARY}; sha256sum {CANARY}; ls -la {CANARY_DIR} | "
                    "tail -n +2 | awk '{print $1, $5, $9}'")


def plant(path: str, target: str) -> str:
    """Shell: move what is at `path` aside, then a link there to `target`."""
    return (f"mkdir -p $(dirname {path}) && if [ -e {path} ] || [ -L {path} ]; then "
            f"mv -T {path} {path}.h-fls-aside; fi && ln -s {target} {path}")


def unplant(path: str) -> str:
    return (f"rm -f {path} && if [ -e {path}.h-fls-aside ] || [ -L {path}.h-fls-aside ]; then "
            f"mv -T {path}.h-fls-aside {path}; fi")


LINKS = [  # (what rollout writes there, the link's target, words the refusal names)
    ("/data/zk/cuzk.toml.new", CANARY, "/data/zk/cuzk.toml.new is a symbolic link"),
    ("/data/zk/cuzk.toml", CANARY, "/data/zk/cuzk.toml is a symbolic link"),
    ("/data/32gbench/c1.json.partial", CANARY,
     "/data/32gbench/c1.json.partial is a symbolic link"),
    ("/data/rollout/validated.json", CANARY, "/data/rollout/validated.json is a symbolic link"),
    ("/data/rollout/validated.json.new", CANARY,
     "/data/rollout/validated.json.new is a symbolic link"),
    ("/data/rollout/previous_release", CANARY,
     "/data/rollout/previous_release is a symbolic link"),
    ("/data/rollout/staging", CANARY_DIR, "/data/rollout/staging is a symbolic link"),
    ("/data/releases/planted", CANARY_DIR, "/data/releases/planted is a symbolic link"),
    ("/data/rollout/exits.jsonl", CANARY, "/data/rollout/exits.jsonl is a symbolic link"),
    ("/data/rollout/drains.jsonl", CANARY, "/data/rollout/drains.jsonl is a symbolic link"),
    ("/data/rollout/hold", CANARY, "/data/rollout/hold is a symbolic link"),
    ("/data/rollout/runs/planted-run/guard.jsonl", CANARY,
     "/data/rollout/runs/planted-run/guard.jsonl is a symbolic link"),
    ("/data/rollout/runs", CANARY_DIR, "/data/rollout/runs is a symbolic link"),
]


def refused_at_preflight(run: CliRun) -> str:
    assert run.code == 1, run.stderr[-3000:]
    end = run.host_end(HOST)
    assert end["status"] == "skipped" and "host untouched" in end["reason"], end
    steps = run.steps(HOST)
    assert steps["preflight"]["status"] == "failed", steps
    assert "upload" not in steps and "stop" not in steps and "config" not in steps
    return str(steps["preflight"]["reason"])


def never_echoed(run: CliRun) -> None:
    assert SECRET not in run.stdout + run.stderr + json.dumps(run.events)


@pytest.mark.parametrize(("path", "target", "named"), LINKS,
                         ids=[p.removeprefix("/data/") for p, _, _ in LINKS])
def test_a_planted_link_is_refused_and_nothing_leaves_data(
    fleet: LabFleet, tmp_path: Path, path: str, target: str, named: str
) -> None:
    before, pid = targets(), daemon_pid(HOST)
    sh(HOST, plant(path, target))
    try:
        run = deploy(tmp_path, fleet, "links-new")
        reason = refused_at_preflight(run)
        assert named in reason and "never writes through a link" in reason, reason
        assert targets() == before
        assert sh(HOST, f"test -L {path} && echo link").strip() == "link"
        never_echoed(run)
    finally:
        sh(HOST, unplant(path))
    assert daemon_pid(HOST) == pid
    assert assert_serving(HOST) == "links-base"


def test_current_outside_releases_is_refused_never_recorded(
    fleet: LabFleet, tmp_path: Path
) -> None:
    kept = sh(HOST, "readlink /data/current").strip()
    previous = sh(HOST, "cat /data/rollout/previous_release 2>/dev/null; true")
    sh(HOST, f"ln -sfn {CANARY_DIR} /data/current")
    try:
        reason = refused_at_preflight(deploy(tmp_path, fleet, "links-new"))
        assert "/data/current points outside /data/releases" in reason, reason
        assert sh(HOST, "cat /data/rollout/previous_release 2>/dev/null; true") == previous
    finally:
        sh(HOST, f"ln -sfn {kept} /data/current")
    assert assert_serving(HOST) == "links-base"


@pytest.mark.parametrize(("plant_cmd", "undo", "named"), [
    ("chmod 0777 /data", "chmod 0755 /data", "/data is group- or world-writable (mode 0777)"),
    ("chmod 0775 /data/rollout", "chmod 0755 /data/rollout",
     "/data/rollout is group- or world-writable (mode 0775)"),
    ("chown nobody /data/rollout/supervisor.py", "chown root /data/rollout/supervisor.py",
     "/data/rollout/supervisor.py is owned by uid"),
    ("chmod 0666 /data/rollout/supervisor.py", "chmod 0644 /data/rollout/supervisor.py",
     "/data/rollout/supervisor.py is group- or world-writable"),
], ids=["data-0777", "rollout-0775", "supervisor-nobody", "supervisor-0666"])
def test_a_tree_others_may_write_is_refused_before_root_runs_anything(
    fleet: LabFleet, tmp_path: Path, plant_cmd: str, undo: str, named: str
) -> None:
    sup = sh(HOST, "sha256sum /data/rollout/supervisor.py")
    sh(HOST, plant_cmd)
    try:
        reason = refused_at_preflight(deploy(tmp_path, fleet, "links-new"))
        assert named in reason, reason
        assert sh(HOST, "sha256sum /data/rollout/supervisor.py") == sup, "not replaced, not run"
    finally:
        sh(HOST, undo)
    assert assert_serving(HOST) == "links-base"


@pytest.mark.parametrize("how", ["link", "not-json", "guard-link"])
def test_a_lock_that_is_not_rollouts_is_named_never_read_out(
    fleet: LabFleet, tmp_path: Path, how: str
) -> None:
    before = targets()
    if how == "link":
        sh(HOST, f"ln -s {CANARY} /data/rollout/lock")
    elif how == "guard-link":
        sh(HOST, plant("/data/rollout/lock.guard", CANARY))
    else:
        sh(HOST, f"printf '%s\\n' {SECRET} > /data/rollout/lock")
    try:
        run = deploy(tmp_path, fleet, "links-new")
        assert run.code != 0, run.stderr[-2000:]
        out = run.stdout + run.stderr
        if how != "not-json":
            assert f"/data/rollout/{'lock' if how == 'link' else 'lock.guard'} is a symbolic " \
                "link" in out, out[-2000:]
            assert "upload" not in run.steps(HOST) and "stop" not in run.steps(HOST)
        else:
            assert f"not rollout's lock ({len(SECRET) + 1} bytes, not JSON)" in out, out[-2000:]
        never_echoed(run)
        assert targets() == before
    finally:
        sh(HOST, f"rm -f /data/rollout/lock && {unplant('/data/rollout/lock.guard')}")
    assert assert_serving(HOST) == "links-base"


def test_a_single_start_never_runs_a_supervisor_others_may_write(
    fleet: LabFleet, tmp_path: Path
) -> None:
    """`rollout start` (no preflight) with the supervisor stopped and its script not root's:
    refused with the reason, the script is not run; once root's again, start serves."""
    hosts = str(fleet.fleet_path)
    assert run_cli(tmp_path, "stop", HOST, "--hosts", hosts).code == 0
    sh(HOST, "python3 /data/rollout/supervisor.py --root /data --stop >/dev/null; "
             "chown nobody /data/rollout/supervisor.py")
    try:
        started = run_cli(tmp_path, "start", HOST, "--hosts", hosts)
        said = started.stdout + started.stderr
        assert started.code != 0, said[-3000:]
        assert "refused to run the supervisor" in said and "supervisor.py" in said, said[-3000:]
        assert sh(HOST, "pgrep -f '[s]upervisor.py' || true").strip() == ""
    finally:
        sh(HOST, "chown root /data/rollout/supervisor.py")
    again = run_cli(tmp_path, "start", HOST, "--hosts", hosts)
    assert again.code == 0, again.stdout[-3000:] + again.stderr[-3000:]
    assert assert_serving(HOST) == "links-base"
