"""`inv bench --simulate N`: the real engine against N in-process simulated hosts (simhost),
each behind a wire with a latency, a bandwidth and a failure rate; only the transport is
simulated. The run is the lab playbook's (a canary, then the rest), with the run's locks,
its heartbeat, staging ahead, the durable journal and the console (written to /dev/null),
as `rollout rollout` wires them (commands/app.py: make_bus).

Figures: the controller's CPU per host (the process's CPU less what the simulated hosts
spent answering), its peak RSS growth per host, the peak of live threads, the journal's
bytes, and the wall time against the ideal: each batch's hosts' own time on the wire
worked through `concurrency` workers, the longest host at least."""

from __future__ import annotations

import hashlib
import json
import os
import resource
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from rollout.bench.simhost import RELEASES, Flight, SimHost, Wire
from rollout.config.inventory import Host, Inventory
from rollout.config.playbook import LAB_PLAYBOOK, parse_set_options
from rollout.config.sections import CONCURRENCY
from rollout.engine.locks import LockPolicy, holder_for
from rollout.engine.plan import Plan, make_plan
from rollout.engine.run import Engine, EngineOptions
from rollout.errors import EnvironmentProblem
from rollout.output.console import ConsoleSink, make_console
from rollout.output.events import EventBus, JsonLinesSink
from rollout.steps.decision import Artifact, Release
from rollout.steps.kinds import load_playbook

NAMES = ("cuzk-daemon", "cuzk-bench")
FIGURES = ("hosts", "concurrency", "outcomes", "wall_s", "ideal_s", "wall_vs_ideal",
           "cpu_s", "cpu_per_host_ms", "peak_rss_mib", "rss_per_host_kib", "peak_threads",
           "peak_in_flight", "journal_bytes", "journal_per_host_bytes")


@dataclass(frozen=True)
class Simulation:
    hosts: int
    wire: Wire = Wire()
    concurrency: int = CONCURRENCY
    artifact_bytes: int = 64 << 10  # each of the release's two executables


def simulate(sim: Simulation, work: Path) -> dict[str, Any]:
    """One simulated rollout (its files under `work`): the figures named in FIGURES."""
    flight = Flight()
    fleet = {n: _serving(n, sim.wire, flight) for n in (f"sim-{i:05d}" for i in range(sim.hosts))}
    plan = _plan(list(fleet), sim.concurrency)
    release = _release(work, sim.artifact_bytes)
    journal = work / f"{plan.run_id}.jsonl"
    rss_before = _rss_kib()
    with open(os.devnull, "w") as devnull, _peak_threads() as threads:
        bus = EventBus(plan.run_id)
        bus.subscribe(JsonLinesSink.to_path(journal, durable=True))
        bus.subscribe(ConsoleSink(make_console(devnull)))
        options = EngineOptions(holder_for(plan.run_id, "bench", "simulated", plan.version),
                                LockPolicy(), release=release)
        cpu, wall = time.process_time(), time.monotonic()
        summary = Engine(plan, bus, lambda h: fleet[h.name], work, options).run()
        cpu, wall = time.process_time() - cpu, time.monotonic() - wall
    host_cpu = sum(h.cpu for h in fleet.values())
    outcomes: dict[str, int] = {}
    for outcome in summary.outcomes.values():
        outcomes[outcome.status] = outcomes.get(outcome.status, 0) + 1
    ideal = _ideal(plan, fleet, sim.concurrency)
    controller = max(0.0, cpu - host_cpu)
    grown = max(0, _peak_rss_kib() - rss_before)
    size = journal.stat().st_size
    return {"hosts": sim.hosts, "concurrency": sim.concurrency, "outcomes": outcomes,
            "wall_s": round(wall, 2), "ideal_s": round(ideal, 2),
            "wall_vs_ideal": round(wall / ideal, 2) if ideal else None,
            "cpu_s": round(controller, 2),
            "cpu_per_host_ms": round(1000 * controller / sim.hosts, 2),
            "peak_rss_mib": round(_peak_rss_kib() / 1024, 1),
            "rss_per_host_kib": round(grown / sim.hosts, 1),
            "peak_threads": threads[0], "peak_in_flight": flight.peak,
            "journal_bytes": size, "journal_per_host_bytes": round(size / sim.hosts)}


def _serving(name: str, wire: Wire, flight: Flight) -> SimHost:
    """A host that runs release OLD, held by nobody: the rollout replaces it."""
    old = {n: hashlib.sha256(f"{n} of old".encode()).hexdigest() for n in NAMES}
    return SimHost(name, current=OLD, releases={OLD: old}, daemon=OLD, supervisor=True,
                   files={f"{RELEASES}/{OLD}/{n}": d for n, d in old.items()},
                   wire=wire, flight=flight)


OLD = "0" * 12


def _plan(names: list[str], concurrency: int) -> Plan:
    """The lab playbook for these hosts: no params, no cordon (a simulated host runs no
    curio), rolling.concurrency as asked."""
    overrides = parse_set_options(("params_files=[]", "pce_bytes=0", 'serial=[1, "100%"]',
                                   "max_fail_percentage=100"))
    settings = {"work.cordon": None, "work.uncordon": None, "rolling.concurrency": concurrency}
    playbook = load_playbook(LAB_PLAYBOOK, overrides=overrides, settings=settings)
    hosts = [Host(n, "192.0.2.1", 22 + i, "root", None, Path("/k"), "strict", 10, (), {})
             for i, n in enumerate(names)]
    return make_plan(playbook, Inventory(Path("simulated.yaml"), hosts), None)


def _release(work: Path, size: int) -> Release:
    artifacts = []
    for name in NAMES:
        path = work / name
        path.write_bytes(name.encode() * (size // len(name) + 1))
        digest = hashlib.sha256(path.read_bytes()).hexdigest()
        artifacts.append(Artifact(name, str(path), digest, path.stat().st_size))
    rid = hashlib.sha256(b"".join(a.sha256.encode() for a in artifacts)).hexdigest()[:12]
    return Release(rid, "simulated", rid, tuple(artifacts))


def _ideal(plan: Plan, fleet: dict[str, SimHost], concurrency: int) -> float:
    """The hosts' own time at this concurrency: per batch, its hosts' time on the wire over
    the workers, the longest host at least."""
    total = 0.0
    for batch in plan.batches:
        busy = [fleet[n].busy for n in batch]
        total += max(max(busy, default=0.0), sum(busy) / min(concurrency, len(batch) or 1))
    return total


def _rss_kib() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * (os.sysconf("SC_PAGE_SIZE") // 1024)


def _peak_rss_kib() -> int:
    return int(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)


@contextmanager
def _peak_threads(every: float = 0.05) -> Iterator[list[int]]:
    """The peak of threading.active_count() while the body runs, sampled."""
    peak = [threading.active_count()]
    done = threading.Event()

    def sample() -> None:
        while not done.wait(every):
            peak[0] = max(peak[0], threading.active_count())

    sampler = threading.Thread(target=sample, name="bench-threads", daemon=True)
    sampler.start()
    try:
        yield peak
    finally:
        done.set()
        sampler.join()


def fleet_sizes(sizes: tuple[int, ...], wire: Wire, concurrency: int | None = None
                ) -> list[dict[str, Any]]:
    """simulate() at each size, each in a fresh Python of its own (its peak RSS its own);
    `concurrency` None: rolling.concurrency's default."""
    rows = []
    for hosts in sizes:
        asked = json.dumps({"hosts": hosts, "wire": asdict(wire),
                            "concurrency": concurrency or CONCURRENCY})
        done = subprocess.run([sys.executable, "-m", "rollout.bench.simulate", asked],
                              capture_output=True, text=True, check=False)
        if done.returncode != 0:
            raise EnvironmentProblem(f"the simulation of {hosts} hosts exited "
                                     f"{done.returncode}:\n{done.stderr[-2000:]}")
        rows.append(json.loads(done.stdout.splitlines()[-1]))
    return rows


def _child(asked: str) -> None:
    """One simulation, asked as JSON on the command line; its figures, one JSON line."""
    given = json.loads(asked)
    sim = Simulation(int(given["hosts"]), Wire(**given["wire"]), int(given["concurrency"]))
    with tempfile.TemporaryDirectory(prefix="rollout-simulate-") as work:
        print(json.dumps(simulate(sim, Path(work))))


def table(rows: list[dict[str, Any]]) -> str:
    """The figures as a markdown table, a row per run."""
    shown = [f for f in FIGURES if f != "outcomes"]
    lines = ["| " + " | ".join(shown) + " |", "|" + "---|" * len(shown)]
    lines += ["| " + " | ".join(str(r.get(f, "")) for f in shown) + " |" for r in rows]
    return "\n".join(lines)


PLOTTED = (("cpu_per_host_ms", "controller CPU per host (ms)"),
           ("rss_per_host_kib", "peak RSS growth per host (KiB)"),
           ("wall_vs_ideal", "wall time / ideal"))


def svg(rows: list[dict[str, Any]]) -> str:
    """The figures per fleet size as bars, a panel per figure: a small SVG, no library."""
    width, height, bar = 220, 160, 40
    parts = []
    for panel, (key, title) in enumerate(PLOTTED):
        x0 = panel * width
        parts.append(f'<text x="{x0 + 10}" y="16" font-size="11">{title}</text>')
        top = max((float(r.get(key) or 0) for r in rows), default=0.0) or 1.0
        for i, row in enumerate(rows):
            value = float(row.get(key) or 0)
            h = (height - 60) * value / top
            x = x0 + 20 + i * (bar + 20)
            parts.append(f'<rect x="{x}" y="{height - 30 - h:.1f}" width="{bar}" '
                         f'height="{h:.1f}" fill="#4a7bb7"/>')
            parts.append(f'<text x="{x}" y="{height - 34 - h:.1f}" font-size="10">'
                         f'{value:g}</text>')
            parts.append(f'<text x="{x}" y="{height - 14}" font-size="10">'
                         f'{row["hosts"]} hosts</text>')
    return (f'<svg xmlns="http://www.w3.org/2000/svg" width="{width * len(PLOTTED)}" '
            f'height="{height}" font-family="sans-serif">' + "".join(parts) + "</svg>\n")


if __name__ == "__main__":
    _child(sys.argv[1])
