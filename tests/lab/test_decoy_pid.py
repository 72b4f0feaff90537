"""A decoy named by daemon.pid (issue 28), on the lab: a program copied into the current
release's folder and started by hand, its pid, real start time and executable (or none)
written to daemon.pid.
`rollout stop` signals nothing (the supervisor's own record names another process), and
the daemon the supervisor started still serves."""

from __future__ import annotations

from pathlib import Path

import pytest

from rollout import lab

from .conftest import LabFleet
from .rollout_helpers import FAST_KNOBS, assert_serving, fresh_fleet, rollout_args, run_cli, sh

pytestmark = pytest.mark.lab
HOST = "lab-1"


@pytest.fixture(scope="module")
def fleet(lab_fleet: LabFleet, tmp_path_factory: pytest.TempPathFactory) -> LabFleet:
    base = tmp_path_factory.mktemp("base")
    return fresh_fleet(lab_fleet, [HOST], lambda: run_cli(
        base, *rollout_args(lab_fleet.fleet_path, "decoy-base"), "--limit", HOST, "--set",
        f"lab_knobs={FAST_KNOBS}"))


def running(pid: int) -> bool:
    return lab.exec_on(HOST, f"grep -qv '^[^)]*) [ZX] ' /proc/{pid}/stat")[0] == 0


def test_a_decoy_under_releases_is_never_stopped_as_the_daemon(fleet: LabFleet,
                                                               tmp_path: Path) -> None:
    original = sh(HOST, "cat /data/rollout/daemon.pid").strip()
    real, _, exe = original.split()
    copy = exe.rsplit("/", 1)[0] + "/decoy"  # lives under /data/releases
    decoy = int(sh(HOST, f"cp /bin/sleep {copy} && nohup {copy} 100000 > /dev/null 2>&1 "
                         "< /dev/null & echo $!").split()[0])
    try:
        start = sh(HOST, f"cut -d' ' -f22 /proc/{decoy}/stat").strip()
        assert running(decoy), "the decoy did not start"
        for named in (f"{decoy} {start} {copy}", f"{decoy} {start}"):
            sh(HOST, f"echo '{named}' > /data/rollout/daemon.pid")
            stopped = run_cli(tmp_path, "stop", HOST, "--hosts", str(fleet.fleet_path))
            assert stopped.code == 1, stopped.stderr[-3000:]
            assert "nothing signalled" in stopped.stderr, stopped.stderr[-3000:]
            assert running(decoy) and running(int(real))
    finally:
        sh(HOST, f"kill -KILL {decoy}; rm -f {copy}; "
                 f"echo '{original}' > /data/rollout/daemon.pid")
    started = run_cli(tmp_path, "start", HOST, "--hosts", str(fleet.fleet_path))
    assert started.code == 0, started.stderr[-3000:]
    assert_serving(HOST)
