"""`inv bench --only startup`: what a command costs from its start to its exit (issue 30).

`rollout --version`, `rollout status` of a lab's hosts, and a rerun with nothing to do
through `inv` (the release every host already serves), each timed as the median of N fresh
processes (wall and CPU, user + system, from wait4), with the machine's load around them.
The lab's hosts are quiet (side_by_side.on_lab), so no proofs are in flight."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rollout.bench.child import rollout_argv, timed_rollout
from rollout.bench.figures import median
from rollout.bench.side_by_side import as_installed, contention, on_lab
from rollout.commands import app
from rollout.config.playbook import LAB_PLAYBOOK
from rollout.errors import EnvironmentProblem, UserError

TARGETS_S = {"version": 0.2, "status": 1.0, "rerun": 1.0}
"""Wall seconds (median) each figure should stay under (issue 30)."""


@dataclass(frozen=True)
class Timing:
    """One command timed in `runs` fresh processes: each one's wall and CPU seconds."""

    name: str
    argv: tuple[str, ...]
    walls: tuple[float, ...]
    cpus: tuple[float, ...]

    def as_dict(self) -> dict[str, Any]:
        wall = median(self.walls)
        return {
            "command": " ".join(self.argv), "runs": len(self.walls),
            "wall_s": round(wall, 3), "cpu_s": round(median(self.cpus), 3),
            "walls_s": [round(w, 3) for w in self.walls],
            "target_s": TARGETS_S[self.name], "met": wall <= TARGETS_S[self.name],
        }  # fmt: skip


def timed(argv: Sequence[str], cwd: Path | None = None) -> tuple[float, float]:
    """One run of `argv`: its wall and CPU seconds; exit 3 when it fails."""
    started = time.monotonic()
    child = subprocess.Popen(list(argv), cwd=cwd, stdin=subprocess.DEVNULL,
                             stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)  # fmt: skip
    assert child.stderr is not None
    said = child.stderr.read()  # read to its end, so a chatty child never blocks
    _, status, usage = os.wait4(child.pid, 0)
    seconds = time.monotonic() - started
    child.stderr.close()
    code = os.waitstatus_to_exitcode(status)
    if code != 0:
        tail = said.decode("utf-8", "replace")[-1500:]
        raise EnvironmentProblem(f"bench: `{' '.join(argv)}` exited {code}:\n{tail}")
    return seconds, usage.ru_utime + usage.ru_stime


def timing(name: str, argv: Sequence[str], runs: int, cwd: Path | None = None) -> Timing:
    measured = [timed(argv, cwd) for _ in range(runs)]
    return Timing(name, tuple(argv), tuple(w for w, _ in measured),
                  tuple(c for _, c in measured))  # fmt: skip


def command(name: str) -> list[str]:
    """The venv's console script `name` (rollout, inv) as an operator runs it."""
    script = Path(sys.executable).parent / name
    if not script.is_file():
        raise EnvironmentProblem(f"bench: no {script}: install rollout (pip install -e .)")
    return [str(script)]


def checkout() -> Path:
    """The checkout whose tasks.py `inv` runs (rollout installed from its src/)."""
    root = Path(__file__).resolve().parents[3]
    if not (root / "tasks.py").is_file():
        raise UserError(f"--only startup times `inv rollout`: run it from a checkout "
                        f"(no tasks.py in {root})")
    return root


def measure(hosts: int, runs: int) -> dict[str, Any]:
    """The three figures on a fresh lab of `hosts` quiet hosts, serving one release."""
    if runs < 1:
        raise UserError(f"--runs {runs}: at least 1")
    root, work = checkout(), Path(tempfile.mkdtemp(prefix="rollout-bench-startup-"))
    bundle = work / "build"
    app.run_build(str(LAB_PLAYBOOK), ("version=bench-startup",), bundle)
    as_installed()

    def body(fleet: Path) -> dict[str, Any]:
        timed_rollout(fleet, bundle, work / "prime.log")  # every host serves the release
        rerun = [*command("inv"), *rollout_argv(fleet, bundle)[3:]]  # the same options
        before = contention()
        figures = [
            timing("version", [*command("rollout"), "--version"], runs),
            timing("status", [*command("rollout"), "status", "--hosts", str(fleet)], runs),
            timing("rerun", rerun, runs, cwd=root),
        ]
        return {"hosts": hosts, **{t.name: t.as_dict() for t in figures},
                "contention": {"before": before, "after": contention()}}  # fmt: skip

    return on_lab(hosts, "1g", body)  # type: ignore[no-any-return]


def summary_table(figures: dict[str, Any]) -> str:
    """The figures as a Markdown table, with the load they were measured under."""
    load = figures["contention"]
    lines = ["| command | wall s (median) | CPU s (median) | target | runs (wall s) |",
             "| --- | --- | --- | --- | --- |"]  # fmt: skip
    said = {"version": "`rollout --version`",
            "status": f"`rollout status`, {figures['hosts']} hosts",
            "rerun": f"`inv rollout`, nothing to do, {figures['hosts']} hosts"}  # fmt: skip
    for name in TARGETS_S:
        f = figures[name]
        walls = ", ".join(f"{w:.2f}" for w in f["walls_s"])
        lines.append(f"| {said[name]} | {f['wall_s']:.3f} | {f['cpu_s']:.3f} | "
                     f"{f['target_s']} s: {'met' if f['met'] else 'not met'} | {walls} |")
    lines.append(f"\nload average {load['before']['loadavg']} before, "
                 f"{load['after']['loadavg']} after, {load['before']['cpus']} CPUs; "
                 f"{load['before']['other_lab_containers']} other labs' containers")
    return "\n".join(lines)
