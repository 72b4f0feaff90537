"""A rollout run the way an operator runs it: `python -m rollout rollout ...` as a child
process, timed from start to exit, with its CPU seconds and peak RSS from wait4()."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

from rollout.bench.figures import Run
from rollout.errors import EnvironmentProblem

FAST = "{pool_mib: 32, load_secs: 0.3, drain_mib_per_sec: 256, prove_secs: 0.1}"


def rollout_argv(fleet: Path, release: Path) -> list[str]:
    return [sys.executable, "-m", "rollout", "rollout", "--hosts", str(fleet),
            "--release", str(release), "--set", f"lab_knobs={FAST}", "--quiet"]  # fmt: skip


def timed_rollout(fleet: Path, release: Path, log: Path) -> Run:
    """Run one rollout as a child; fail (exit 3) if it does not validate every host."""
    with log.open("wb") as out:
        started = time.monotonic()
        child = subprocess.Popen(rollout_argv(fleet, release), stdout=out,
                                 stderr=subprocess.STDOUT)  # fmt: skip
        _, status, usage = os.wait4(child.pid, 0)
        seconds = time.monotonic() - started
    child.returncode = os.waitstatus_to_exitcode(status)
    if child.returncode != 0:
        tail = log.read_text(errors="replace")[-2000:]
        raise EnvironmentProblem(f"bench rollout exited {child.returncode}; see {log}:\n{tail}")
    # ru_maxrss is in KiB on Linux
    return Run(seconds, usage.ru_utime + usage.ru_stime, usage.ru_maxrss / 1024)
