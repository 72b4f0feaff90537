"""The side-by-side bench's arithmetic and its table: pure functions on measured seconds."""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

# Issue 30's acceptance (it tightened issue 16's 1.5x at 64 hosts, 0.1 s of CPU, 2 s rerun)
MAX_RATIO = 1.2  # rollout at most 1.2 times the floor, at 8, 32 and 64 hosts
MAX_CPU_PER_HOST_S = 0.1  # controller CPU seconds per host in a rollout, below LARGE_FLEET
MAX_CPU_PER_HOST_LARGE_S = 0.05  # ... and from LARGE_FLEET hosts on
LARGE_FLEET = 32
MAX_RERUN_S = 1.0  # a rerun with nothing to do, on 8 hosts
MAX_HOST_CPU_ABOVE_FLOOR_S = 0.2  # the hosts' CPU per host, at most this above the floor's


@dataclass(frozen=True)
class Run:
    """One rollout as a child process: wall seconds, CPU seconds (user + system), peak RSS."""

    seconds: float
    cpu_s: float
    peak_rss_mib: float


@dataclass(frozen=True)
class Pair:
    """One alternating pair: a rollout and the floor, on the same hosts, one after the other."""

    rollout: Run
    floor_s: float
    rollout_first: bool
    rollout_host_cpu_s: float | None = None  # all hosts' cgroup CPU during each side
    floor_host_cpu_s: float | None = None


def ratio_target(hosts: int) -> float:
    """rollout / floor at most 1.2, whatever the fleet's size (issue 30)."""
    return MAX_RATIO


def cpu_target(hosts: int) -> float:
    """The controller's CPU seconds per host: 0.1 on small fleets, 0.05 from 32 hosts on."""
    return MAX_CPU_PER_HOST_LARGE_S if hosts >= LARGE_FLEET else MAX_CPU_PER_HOST_S


def median(values: Sequence[float]) -> float:
    if not values:
        raise ValueError("median of no values")
    return float(statistics.median(values))


def ratio(numerator: float, denominator: float) -> float:
    """numerator / denominator; infinite when the denominator is not positive."""
    return numerator / denominator if denominator > 0 else float("inf")


def met(value: float, limit: float) -> str:
    return "met" if value <= limit else "not met"


@dataclass(frozen=True)
class Comparison:
    """The medians of a series of pairs on `hosts` hosts, and what they say."""

    label: str
    hosts: int
    pairs: tuple[Pair, ...]

    @property
    def rollout_median_s(self) -> float:
        return median([p.rollout.seconds for p in self.pairs])

    @property
    def floor_median_s(self) -> float:
        return median([p.floor_s for p in self.pairs])

    @property
    def ratio(self) -> float:
        return ratio(self.rollout_median_s, self.floor_median_s)

    @property
    def cpu_s_per_host(self) -> float:
        return median([p.rollout.cpu_s for p in self.pairs]) / self.hosts

    @property
    def peak_rss_mib(self) -> float:
        return max(p.rollout.peak_rss_mib for p in self.pairs)

    @property
    def ratio_target(self) -> float:
        return ratio_target(self.hosts)

    @property
    def cpu_target(self) -> float:
        return cpu_target(self.hosts)

    def host_cpu_s_per_host(self, side: str) -> float | None:
        """The median over the pairs of the hosts' CPU during `side` ("rollout" or "floor"),
        per host; None where it was not measured."""
        values = [getattr(p, f"{side}_host_cpu_s") for p in self.pairs]
        known = [v for v in values if v is not None]
        return median(known) / self.hosts if known else None

    def as_dict(self) -> dict[str, Any]:
        return {
            "label": self.label,
            "hosts": self.hosts,
            "rollout_s": [round(p.rollout.seconds, 2) for p in self.pairs],
            "floor_s": [round(p.floor_s, 2) for p in self.pairs],
            "rollout_first": [p.rollout_first for p in self.pairs],
            "rollout_cpu_s": [round(p.rollout.cpu_s, 2) for p in self.pairs],
            "rollout_median_s": round(self.rollout_median_s, 2),
            "floor_median_s": round(self.floor_median_s, 2),
            "ratio": round(self.ratio, 2),
            "ratio_target": self.ratio_target,
            "ratio_met": self.ratio <= self.ratio_target,
            "cpu_s_per_host": round(self.cpu_s_per_host, 3),
            "cpu_s_per_host_target": self.cpu_target,
            "cpu_s_per_host_met": self.cpu_s_per_host <= self.cpu_target,
            "peak_rss_mib": round(self.peak_rss_mib, 1),
            "rollout_host_cpu_s": [_rounded(p.rollout_host_cpu_s) for p in self.pairs],
            "floor_host_cpu_s": [_rounded(p.floor_host_cpu_s) for p in self.pairs],
            "rollout_host_cpu_s_per_host": _rounded(self.host_cpu_s_per_host("rollout"), 3),
            "floor_host_cpu_s_per_host": _rounded(self.host_cpu_s_per_host("floor"), 3),
        }


def _rounded(value: float | None, digits: int = 2) -> float | None:
    return None if value is None else round(value, digits)


@dataclass(frozen=True)
class Rerun:
    hosts: int
    run: Run

    def as_dict(self) -> dict[str, Any]:
        return {
            "hosts": self.hosts,
            "seconds": round(self.run.seconds, 2),
            "target_s": MAX_RERUN_S,
            "met": self.run.seconds <= MAX_RERUN_S,
            "cpu_s": round(self.run.cpu_s, 2),
            "peak_rss_mib": round(self.run.peak_rss_mib, 1),
        }


def comparison_rows(c: Comparison) -> list[tuple[str, str, str, str]]:
    """(measure, figure, target, met) rows for one comparison."""
    runs = ", ".join(f"{p.rollout.seconds:.1f}/{p.floor_s:.1f}" for p in c.pairs)
    return [
        (f"{c.label}: rollout / floor, median s", f"{c.rollout_median_s:.2f} / "
         f"{c.floor_median_s:.2f} = {c.ratio:.2f}x  (pairs {runs})",
         f"<= {c.ratio_target}x", met(c.ratio, c.ratio_target)),
        (f"{c.label}: controller CPU s per host", f"{c.cpu_s_per_host:.3f}",
         f"<= {c.cpu_target}", met(c.cpu_s_per_host, c.cpu_target)),
        (f"{c.label}: controller peak RSS", f"{c.peak_rss_mib:.0f} MiB", "reported", "-"),
        *host_cpu_rows(c),
    ]  # fmt: skip


def host_cpu_rows(c: Comparison) -> list[tuple[str, str, str, str]]:
    """The hosts' CPU per host, each side's median (none where it was not measured)."""
    mine, floor = c.host_cpu_s_per_host("rollout"), c.host_cpu_s_per_host("floor")
    if mine is None or floor is None:
        return []
    return [(f"{c.label}: host CPU s per host, rollout / floor",
             f"{mine:.3f} / {floor:.3f} (+{mine - floor:.3f})",
             f"<= floor + {MAX_HOST_CPU_ABOVE_FLOOR_S}",
             met(mine - floor, MAX_HOST_CPU_ABOVE_FLOOR_S))]


def rerun_rows(r: Rerun) -> list[tuple[str, str, str, str]]:
    return [
        (f"rerun, nothing to do, {r.hosts} hosts", f"{r.run.seconds:.2f} s "
         f"(CPU {r.run.cpu_s:.2f} s, RSS {r.run.peak_rss_mib:.0f} MiB)",
         f"<= {MAX_RERUN_S} s", met(r.run.seconds, MAX_RERUN_S)),
    ]  # fmt: skip


def table(rows: Sequence[tuple[str, str, str, str]]) -> str:
    """A Markdown table: it reads in a terminal and pastes into docs."""
    head = ("measure", "figure", "target", "met")
    widths = [max(len(r[i]) for r in (head, *rows)) for i in range(4)]

    def line(cells: Sequence[str]) -> str:
        return "| " + " | ".join(c.ljust(w) for c, w in zip(cells, widths, strict=True)) + " |"

    rule = "| " + " | ".join("-" * w for w in widths) + " |"
    return "\n".join([line(head), rule, *(line(r) for r in rows)])


def summary_table(comparisons: Sequence[Comparison], rerun: Rerun | None) -> str:
    rows = [row for c in comparisons for row in comparison_rows(c)]
    if rerun is not None:
        rows += rerun_rows(rerun)
    return table(rows)


def summary_json(comparisons: Sequence[Comparison], rerun: Rerun | None,
                 contention: Sequence[dict[str, Any]]) -> dict[str, Any]:
    return {
        "comparisons": [c.as_dict() for c in comparisons],
        "rerun": rerun.as_dict() if rerun is not None else None,
        "contention": list(contention),
    }  # fmt: skip
