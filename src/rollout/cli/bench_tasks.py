"""`inv bench`: speed targets as a benchmark you run, never as a timed test."""

from __future__ import annotations

import json
import os
import tempfile
import time
from pathlib import Path

from invoke.context import Context
from invoke.tasks import task

from rollout import lab
from rollout.cli.errors import reports_errors
from rollout.commands import app
from rollout.commands.diagnose import bench_diagnose

FAST = "{pool_mib: 32, load_secs: 0.3, drain_mib_per_sec: 256, prove_secs: 0.1}"


def _timed_rollout(fleet: Path, version: str) -> float:
    request = app.RolloutRequest(str(fleet), None, (f"version={version}", f"lab_knobs={FAST}"))
    started = time.monotonic()
    summary = app.run_rollout(request)
    if summary.exit_code:
        raise SystemExit(f"benchmark rollout {version} failed")
    return time.monotonic() - started


def _diagnose_1gib_log(fleet: Path, host: str) -> dict[str, float]:
    """diagnose of a host whose daemon log is 1 GiB: seconds and bytes brought back."""
    log = "/data/rollout/daemon.log"
    lab.exec_on(host, f"yes 'INFO cuzk_daemon: job j COMPLETED' | head -c 1073741824 >> {log}")
    return bench_diagnose(app.load_fleet(str(fleet), None, host), host)


@task(
    help={
        "hosts": "Lab hosts for the lab.up timing (default 8; target: under 30 s).",
        "output": "Also write the figures as JSON to this file.",
        "only": "Run only this part: `bundles` (a 100 MiB release to N hosts, pushed and "
        "pulled, and the bytes the controller sends per host).",
    }
)
@reports_errors
def bench(c: Context, hosts: int = 8, output: str | None = None, only: str = "") -> None:
    """Measure lab.up for N hosts (cached base image), 3-host rollouts, a bounded diagnose,
    and a 100 MiB release to N hosts pushed and pulled."""
    from rollout.bundle.bench import bench_bundles

    figures: dict[str, float] = {}
    os.environ.setdefault("ROLLOUT_RUNS_DIR", tempfile.mkdtemp(prefix="rollout-bench-"))
    if only == "bundles":
        figures.update(bench_bundles(Path(tempfile.mkdtemp(prefix="rollout-bench-")), hosts))
        return _report(figures, output)
    figures[f"lab_up_{hosts}_hosts_s"] = round(lab.bench_lab_up(hosts), 2)
    fleet = lab.up(3)
    try:
        figures["rollout_3_hosts_first_s"] = round(_timed_rollout(fleet, "bench-1"), 2)
        figures["rollout_3_hosts_next_s"] = round(_timed_rollout(fleet, "bench-2"), 2)
        figures["rollout_3_hosts_rerun_s"] = round(_timed_rollout(fleet, "bench-2"), 2)
        figures.update(_diagnose_1gib_log(fleet, "lab-2"))
    finally:
        lab.down()
    figures.update(bench_bundles(Path(tempfile.mkdtemp(prefix="rollout-bench-")), hosts))
    _report(figures, output)


def _report(figures: dict[str, float], output: str | None) -> None:
    text = json.dumps(figures, indent=2)
    print(text)
    if output:
        Path(output).write_text(text + "\n")
