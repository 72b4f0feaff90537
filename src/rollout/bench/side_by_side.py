"""Rollout against the floor on the same lab hosts and the same build, alternating: each pair
deploys two fresh releases (new release ids), one by a rollout child process, one by the
floor, taking turns at going first. Then a rerun with nothing to do."""

from __future__ import annotations

import compileall
import itertools
import os
import shutil
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import rollout
from rollout import lab
from rollout.bench.bundles import padded_bundle
from rollout.bench.child import timed_rollout
from rollout.bench.figures import Comparison, Pair, Rerun, Run
from rollout.bench.floor import SshHost, run_floor
from rollout.bench.hostcpu import HostCpu, lab_host_cpu
from rollout.bundle.local import open_bundle
from rollout.commands import app
from rollout.config.playbook import LAB_PLAYBOOK
from rollout.lab.fleet import LABEL
from rollout.lab.keys import ensure_client_key

SMALL_PAD = 4096  # bytes: enough for a new release id, nothing to weigh


@dataclass
class Releases:
    """Fresh bundles made from one build: the build's files plus `pad` random bytes."""

    work: Path
    small: Path
    counter: Iterator[int] = field(default_factory=itertools.count)

    def fresh(self, pad: int) -> Path:
        return padded_bundle(self.small, self.work / f"release-{next(self.counter)}", 0, pad)


def lab_hosts() -> list[SshHost]:
    key = ensure_client_key(lab.lab_dir())
    known = lab.lab_dir() / "known_hosts"
    return [SshHost(h["name"], int(h["port"]), key, known) for h in lab.status()]


def contention() -> dict[str, Any]:
    """What else was using the machine: load average and other labs' containers."""
    mine = {c["container"] for c in lab.status()}
    running = lab.ensure_engine().containers.list(filters={"label": LABEL})
    return {"loadavg": [round(x, 2) for x in os.getloadavg()], "cpus": os.cpu_count(),
            "other_lab_containers": sum(1 for c in running if c.name not in mine)}  # fmt: skip


def _rollout(fleet: Path, bundle: Path, log: Path) -> Run:
    try:
        return timed_rollout(fleet, bundle, log)
    finally:
        shutil.rmtree(bundle, ignore_errors=True)


def _floor(hosts: list[SshHost], bundle: Path, work: Path) -> float:
    try:
        return run_floor(hosts, open_bundle(bundle), work)
    finally:
        shutil.rmtree(bundle, ignore_errors=True)


def _on_hosts(cpu: HostCpu, side: Callable[[], Any]) -> tuple[Any, float]:
    """What `side` returns, and the CPU seconds the hosts spent meanwhile (all of them)."""
    before = cpu.seconds()
    result = side()
    return result, cpu.seconds() - before


def alternate(fleet: Path, rel: Releases, pad: int, pairs: int) -> tuple[Pair, ...]:
    hosts, log, out = lab_hosts(), rel.work / "rollout.log", []
    cpu = lab_host_cpu()
    for i in range(pairs):
        first = i % 2 == 0

        def r() -> tuple[Run, float]:
            bundle = rel.fresh(pad)  # made before the count starts: the hosts' CPU only
            return _on_hosts(cpu, lambda: _rollout(fleet, bundle, log))

        def f() -> tuple[float, float]:
            bundle = rel.fresh(pad)
            return _on_hosts(cpu, lambda: _floor(hosts, bundle, rel.work))

        if first:
            run, run_cpu = r()
            floor_s, floor_cpu = f()
        else:
            floor_s, floor_cpu = f()
            run, run_cpu = r()
        out.append(Pair(run, floor_s, first, run_cpu, floor_cpu))
    return tuple(out)


def rerun(fleet: Path, rel: Releases, pad: int) -> Run:
    """A rollout of the release every host already serves: nothing to do."""
    bundle = rel.fresh(pad)
    log = rel.work / "rollout.log"
    timed_rollout(fleet, bundle, log)
    return _rollout(fleet, bundle, log)


def on_lab(hosts: int, memory: str, body: Callable[[Path], Any]) -> Any:
    """`body` on a fresh lab of quiet hosts: no curio-like sidecar sends them proofs (the
    lab's default since issue 17), whose CPU on the shared cores and whose jobs in flight
    (a rollout waits for them, the floor does not) would weigh on one side and not on the
    other."""
    fleet = lab.up(hosts, memory=memory, busy=False)
    try:
        return body(fleet)
    finally:
        lab.down()


@dataclass(frozen=True)
class Plan:
    sizes: tuple[int, ...] = (8, 16, 32, 64)
    pairs: int = 3
    release_mib: int = 100  # 0: no large-release comparison
    release_hosts: int = 8
    rerun_hosts: int = 8
    memory: str = "1g"
    large_memory: str = "4g"  # room for two 100 MiB releases besides the daemon


def as_installed() -> None:
    """Bytecode for rollout's own modules, as `pip install` leaves it: a checkout run with
    PYTHONDONTWRITEBYTECODE (this machine sets it) compiles every module again in each
    rollout child, 0.08 s of its CPU that an operator's install never spends."""
    compileall.compile_dir(str(Path(rollout.__file__).parent), quiet=1)


def measure(work: Path, plan: Plan, say: Callable[[str], None] = print) -> dict[str, Any]:
    as_installed()
    rel = Releases(work, work / "build")
    app.run_build(str(LAB_PLAYBOOK), ("version=bench-floor",), rel.small)  # the stand-in
    results: dict[str, Any] = {"comparisons": [], "contention": []}

    def compare(label: str, n: int, memory: str, pad: int, do_rerun: bool) -> None:
        def body(fleet: Path) -> None:
            results["contention"].append({"label": label, "before": contention()})
            _rollout(fleet, rel.fresh(pad), work / "prime.log")  # supervisor, config, input
            c = Comparison(label, n, alternate(fleet, rel, pad, plan.pairs))
            results["comparisons"].append(c)
            say(f"{label}: rollout {c.rollout_median_s:.2f} s, floor "
                f"{c.floor_median_s:.2f} s ({c.ratio:.2f}x)")  # fmt: skip
            if do_rerun:
                results["rerun"] = Rerun(n, rerun(fleet, rel, pad))
            results["contention"][-1]["after"] = contention()

        on_lab(n, memory, body)

    for n in plan.sizes:
        compare(f"{n} hosts", n, plan.memory, SMALL_PAD, n == plan.rerun_hosts)
    if plan.release_mib:
        compare(f"{plan.release_mib} MiB release, {plan.release_hosts} hosts",
                plan.release_hosts, plan.large_memory, plan.release_mib << 20,
                "rerun" not in results and plan.release_hosts == plan.rerun_hosts)  # fmt: skip
    return results
