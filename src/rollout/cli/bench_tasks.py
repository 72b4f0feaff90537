"""`inv bench`: speed targets as a benchmark you run, never as a timed test."""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from invoke.context import Context

from rollout.cli.errors import reports_errors
from rollout.cli.taskdef import task
from rollout.errors import UserError

if TYPE_CHECKING:
    from rollout.bench.side_by_side import Plan

FAST = "{pool_mib: 32, load_secs: 0.3, drain_mib_per_sec: 256, prove_secs: 0.1}"


def _timed_rollout(fleet: Path, version: str) -> float:
    # for start-up time: --version and --help load no command
    from rollout.commands import app

    request = app.RolloutRequest(str(fleet), None, (f"version={version}", f"lab_knobs={FAST}"))
    started = time.monotonic()
    summary = app.run_rollout(request)
    if summary.exit_code:
        raise SystemExit(f"benchmark rollout {version} failed")
    return time.monotonic() - started


def _diagnose_1gib_log(fleet: Path, host: str) -> dict[str, float]:
    """diagnose of a host whose daemon log is 1 GiB: seconds and bytes brought back."""
    from rollout import lab  # the lab (Docker) only where a benchmark runs: not for a rollout

    # for start-up time: --version and --help load no command
    from rollout.commands import app
    from rollout.commands.diagnose import bench_diagnose

    log = "/data/rollout/daemon.log"
    lab.exec_on(host, f"yes 'INFO cuzk_daemon: job j COMPLETED' | head -c 1073741824 >> {log}")
    return bench_diagnose(app.load_fleet(str(fleet), None, host), host)


@task(
    help={
        "hosts": "Lab hosts for the lab.up timing (default 8; target: under 30 s).",
        "output": "Also write the figures as JSON to this file.",
        "only": "Run only this part: `bundles` (a 100 MiB release to N hosts, pushed and "
        "pulled, and the bytes the controller sends per host) or `floor` (rollout against "
        "the floor script, side by side: see docs/bench.md).",
        "sizes": "floor: fleet sizes to compare on, comma-separated (8 alone: a quick run).",
        "pairs": "floor: alternating rollout/floor pairs per size (the median is reported).",
        "release_mib": "floor: also compare with a release this large on 8 hosts (0: skip).",
    }
)
@reports_errors
def bench(c: Context, hosts: int = 8, output: str | None = None, only: str = "",
          sizes: str = "8,16,32,64", pairs: int = 3, release_mib: int = 100) -> None:
    """Measure lab.up for N hosts (cached base image), 3-host rollouts, a bounded diagnose,
    a 100 MiB release to N hosts pushed and pulled, and rollout against the floor."""
    from rollout import lab  # the lab (Docker) only where a benchmark runs: not for a rollout
    from rollout.bench.bundles import bench_bundles  # the benchmarks: loaded when one runs
    from rollout.bench.side_by_side import Plan

    figures: dict[str, Any] = {}
    os.environ.setdefault("ROLLOUT_RUNS_DIR", tempfile.mkdtemp(prefix="rollout-bench-"))
    if only not in ("", "bundles", "floor"):
        raise UserError(f"--only {only!r}: use bundles or floor")
    floor_plan = Plan(_sizes(sizes), pairs, release_mib)
    if only == "bundles":
        figures.update(bench_bundles(Path(tempfile.mkdtemp(prefix="rollout-bench-")), hosts))
        return _report(figures, output)
    if only == "floor":
        figures["side_by_side"] = _side_by_side(floor_plan)
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
    figures["side_by_side"] = _side_by_side(floor_plan)
    _report(figures, output)


def _sizes(text: str) -> tuple[int, ...]:
    try:
        sizes = tuple(int(s) for s in text.split(",") if s.strip())
    except ValueError:
        sizes = ()
    if not sizes or any(not 1 <= n <= 64 for n in sizes):
        raise UserError(f"--sizes {text!r}: comma-separated host counts from 1 to 64")
    return sizes


def _side_by_side(plan: Plan) -> dict[str, Any]:
    """Rollout against the floor; prints the table, returns the figures."""
    from rollout.bench.figures import summary_json, summary_table  # loaded when one runs
    from rollout.bench.side_by_side import measure

    work = Path(tempfile.mkdtemp(prefix="rollout-bench-floor-"))
    try:
        results = measure(work, plan)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print(summary_table(results["comparisons"], results.get("rerun")))
    return summary_json(results["comparisons"], results.get("rerun"), results["contention"])


def _report(figures: dict[str, Any], output: str | None) -> None:
    text = json.dumps(figures, indent=2)
    print(text)
    if output:
        Path(output).write_text(text + "\n")
