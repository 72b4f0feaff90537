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
    from rollout.commands.diagnose import bench_diagnose
    from rollout.commands.fleet import load_fleet

    log = "/data/rollout/daemon.log"
    lab.exec_on(host, f"yes 'INFO cuzk_daemon: job j COMPLETED' | head -c 1073741824 >> {log}")
    return bench_diagnose(load_fleet(str(fleet), None, host), host)


@task(
    help={
        "hosts": "Lab hosts for the lab.up timing (default 8; target: under 30 s), and for "
        "the start-up figures' status and rerun.",
        "output": "Also write the figures as JSON to this file.",
        "only": "Run only this part: `bundles` (a 100 MiB release to N hosts, pushed and "
        "pulled, and the bytes the controller sends per host), `floor` (rollout against "
        "the floor script, side by side: see docs/bench.md) or `startup` (`rollout "
        "--version`, `rollout status` and a rerun with nothing to do through `inv`).",
        "sizes": "floor: fleet sizes to compare on, comma-separated (8 alone: a quick run).",
        "pairs": "floor: alternating rollout/floor pairs per size (the median is reported).",
        "release_mib": "floor: also compare with a release this large on 8 hosts (0: skip).",
        "runs": "startup: fresh processes per command (the median is reported).",
        "simulate": "Only this: the real engine against in-process simulated hosts, at each "
        "of these fleet sizes (comma-separated, e.g. 100,1000,5000), a Python each (see "
        "docs/bench.md).",
        "latency_ms": "simulate: each round trip's latency, in milliseconds.",
        "mbit": "simulate: each host's bandwidth in Mbit/s (0: no limit).",
        "failure_rate": "simulate: the share of round trips that lose the session (0 to 1).",
        "concurrency": "simulate: rolling.concurrency (0: its default).",
        "plot": "simulate: also write the figures as an SVG plot to this file.",
    }
)
@reports_errors
def bench(c: Context, hosts: int = 8, output: str | None = None, only: str = "",
          sizes: str = "8,16,32,64", pairs: int = 3, release_mib: int = 100,
          runs: int = 5, simulate: str = "", latency_ms: float = 20.0, mbit: float = 1000.0,
          failure_rate: float = 0.0, concurrency: int = 0, plot: str | None = None) -> None:
    """Measure lab.up for N hosts (cached base image), 3-host rollouts, a bounded diagnose,
    a 100 MiB release to N hosts pushed and pulled, rollout against the floor, and how
    long commands take to start."""
    workers = _concurrency(concurrency)
    from rollout import lab  # the lab (Docker) only where a benchmark runs: not for a rollout
    from rollout.bench.bundles import bench_bundles  # the benchmarks: loaded when one runs
    from rollout.bench.side_by_side import Plan

    figures: dict[str, Any] = {}
    if simulate:
        wire = (latency_ms / 1000, mbit * 125_000, failure_rate)  # seconds, bytes/s, share
        figures["simulated"] = _simulated(_sizes(simulate, "--simulate", 100_000), wire,
                                          workers, plot)
        return _report(figures, output)
    os.environ.setdefault("ROLLOUT_RUNS_DIR", tempfile.mkdtemp(prefix="rollout-bench-"))
    if only not in ("", "bundles", "floor", "startup"):
        raise UserError(f"--only {only!r}: use bundles, floor or startup")
    floor_plan = Plan(_sizes(sizes), pairs, release_mib)
    if only == "bundles":
        figures.update(bench_bundles(Path(tempfile.mkdtemp(prefix="rollout-bench-")), hosts))
        return _report(figures, output)
    if only == "floor":
        figures["side_by_side"] = _side_by_side(floor_plan)
        return _report(figures, output)
    if only == "startup":
        figures["startup"] = _startup(hosts, runs)
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
    figures["startup"] = _startup(hosts, runs)
    _report(figures, output)


def _sizes(text: str, flag: str = "--sizes", most: int = 64) -> tuple[int, ...]:
    try:
        sizes = tuple(int(s) for s in text.split(",") if s.strip())
    except ValueError:
        sizes = ()
    if not sizes or any(not 1 <= n <= most for n in sizes):
        raise UserError(f"{flag} {text!r}: comma-separated host counts from 1 to {most}")
    return sizes


def _concurrency(value: int) -> int | None:
    """--concurrency as rolling.concurrency (None for 0: its default); outside its declared
    bounds, refused naming the flag before anything runs."""
    if value == 0:
        return None
    from rollout.config.sections import RollingSpec  # the bounds, declared once there

    meta = RollingSpec.model_fields["concurrency"].metadata
    low, high = (next(getattr(m, k) for m in meta if hasattr(m, k)) for k in ("ge", "le"))
    if not low <= value <= high:
        raise UserError(f"--concurrency {value}: use {low} to {high} (rolling.concurrency's "
                        "bounds), or 0 for its default")
    return value


def _simulated(sizes: tuple[int, ...], wire: tuple[float, float, float],
               concurrency: int | None, plot: str | None) -> list[dict[str, Any]]:
    """The simulated fleets; prints the table, writes the plot, returns the figures."""
    from rollout.bench import simulate  # loaded when one runs
    from rollout.bench.simhost import Wire

    latency, bandwidth, failure_rate = wire
    if not (0 <= failure_rate <= 1 and latency >= 0 and bandwidth >= 0):
        raise UserError("--latency-ms and --mbit are 0 or more, --failure-rate 0 to 1")
    rows = simulate.fleet_sizes(sizes, Wire(latency, bandwidth, failure_rate), concurrency)
    print(simulate.table(rows))
    if plot:
        Path(plot).write_text(simulate.svg(rows))
    return rows


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


def _startup(hosts: int, runs: int) -> dict[str, Any]:
    """How long commands take to start and end; prints the table, returns the figures."""
    from rollout.bench.startup import measure, summary_table  # loaded when one runs

    figures = measure(hosts, runs)
    print(summary_table(figures))
    return figures


def _report(figures: dict[str, Any], output: str | None) -> None:
    text = json.dumps(figures, indent=2)
    print(text)
    if output:
        Path(output).write_text(text + "\n")
