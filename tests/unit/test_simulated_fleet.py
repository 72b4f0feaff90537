"""The simulated fleet (rollout.bench.simhost, simulate) and rolling.concurrency: a batch
larger than the bound is worked through it, the wire's knobs do what they say, and the
bench's simulation returns its figures. Behaviour only, never timing."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from rollout.bench.simhost import Flight, SimHost, Wire
from rollout.bench.simulate import FIGURES, OLD, Simulation, _release, _serving, simulate
from rollout.config.inventory import Host, Inventory
from rollout.config.playbook import LAB_PLAYBOOK, parse_set_options
from rollout.engine.locks import LockPolicy, holder_for
from rollout.engine.plan import Plan, make_plan
from rollout.engine.run import Engine, EngineOptions, RunSummary
from rollout.errors import ConfigError, TransportError
from rollout.output.events import Event, EventBus
from rollout.steps.kinds import load_playbook


def _plan(names: list[str], serial: str, concurrency: int) -> Plan:
    overrides = parse_set_options(("params_files=[]", "pce_bytes=0", f"serial={serial}",
                                   "max_fail_percentage=100"))
    settings = {"work.cordon": None, "work.uncordon": None, "rolling.concurrency": concurrency}
    playbook = load_playbook(LAB_PLAYBOOK, overrides=overrides, settings=settings)
    hosts = [Host(n, "192.0.2.1", 22 + i, "root", None, Path("/k"), "strict", 10, (), {})
             for i, n in enumerate(names)]
    return make_plan(playbook, Inventory(Path("fleet.yaml"), hosts), None)


def _roll(tmp_path: Path, fleet: dict[str, SimHost], plan: Plan,
          options: EngineOptions | None = None,
          listen: Callable[[Event], None] | None = None) -> RunSummary:
    """The plan rolled onto the fleet under the run's locks; `listen`: sees each event."""
    bus = EventBus(plan.run_id)
    if listen is not None:
        bus.subscribe(listen)
    options = options or EngineOptions()
    options.holder = holder_for(plan.run_id, "op", "ctl", "v")
    options.release = _release(tmp_path, 1024)
    return Engine(plan, bus, lambda h: fleet[h.name], tmp_path, options).run()


def _fleet(count: int, wire: Wire, flight: Flight) -> dict[str, SimHost]:
    return {f"h{i:02d}": _serving(f"h{i:02d}", wire, flight) for i in range(count)}


@pytest.mark.parametrize("serial", ["[20]", '[1, "100%"]'])  # the second stages ahead
def test_a_batch_larger_than_the_concurrency_is_worked_through_it(tmp_path: Path,
                                                                  serial: str) -> None:
    flight = Flight()
    fleet = _fleet(20, Wire(latency=0.002), flight)
    summary = _roll(tmp_path, fleet, _plan(list(fleet), serial, 4))
    assert summary.exit_code == 0
    assert {o.status for o in summary.outcomes.values()} == {"validated"}
    assert 1 <= flight.peak <= 4  # locks, batches, staging ahead: never more hosts at once
    assert all(h.current != OLD for h in fleet.values())


def test_with_a_live_heartbeat_at_most_three_times_the_bound_are_in_flight(tmp_path: Path) -> None:
    """A live heartbeat (a beat every 0.2 s) during the run: at most rolling.concurrency
    hosts at work on steps, and beside them the heartbeat's refreshes, at most twice
    rolling.concurrency more (a thread for each host at work, whose refresh waits for its
    call, and as many for the others): never more than three times the bound at once."""
    flight = Flight()
    fleet = _fleet(20, Wire(latency=0.01), flight)
    options = EngineOptions()
    options.locks = LockPolicy(stale_after=1.2)
    summary = _roll(tmp_path, fleet, _plan(list(fleet), '[1, "100%"]', 4), options)
    assert summary.exit_code == 0
    assert any('"do": "refresh"' in c for h in fleet.values() for c in h.sent)
    assert 1 <= flight.peak <= 3 * 4


def test_after_an_interrupt_no_host_waiting_its_turn_starts(tmp_path: Path) -> None:
    fleet = _fleet(5, Wire(), Flight())
    options = EngineOptions()

    def interrupt_at_first_end(event: Event) -> None:
        if event.kind == "host_end":
            options.interrupted.set()

    summary = _roll(tmp_path, fleet, _plan(list(fleet), "[5]", 1), options,
                    listen=interrupt_at_first_end)
    statuses = sorted(o.status for o in summary.outcomes.values())
    assert statuses == ["not_started"] * 4 + ["validated"]
    assert "interrupted: no new hosts started" in (summary.aborted or "")
    assert sum(h.current == OLD for h in fleet.values()) == 4  # never touched


def test_the_wire_fails_every_round_trip_at_failure_rate_one() -> None:
    host = SimHost("h1", wire=Wire(failure_rate=1.0, seed=3))
    with pytest.raises(TransportError, match="connection lost to h1"):
        host.call("", "ops.pointed", {})
    calm = SimHost("h1", wire=Wire(failure_rate=0.0, seed=3))
    assert calm.call("", "ops.pointed", {}).ok


def test_failures_are_drawn_from_the_hosts_own_seed() -> None:
    def fails(seed: int) -> list[bool]:
        host = SimHost("h1", wire=Wire(failure_rate=0.5, seed=seed))
        out = []
        for _ in range(40):
            try:
                host.call("", "ops.pointed", {})
                out.append(False)
            except TransportError:
                out.append(True)
        return out

    assert fails(7) == fails(7)
    assert any(fails(7)) and not all(fails(7))


def test_a_fleet_whose_wire_always_fails_has_no_host_validated(tmp_path: Path) -> None:
    flight = Flight()
    fleet = _fleet(6, Wire(failure_rate=1.0, seed=1), flight)
    summary = _roll(tmp_path, fleet, _plan(list(fleet), '[1, "100%"]', 64))
    assert summary.exit_code != 0
    assert not any(o.succeeded for o in summary.outcomes.values())
    assert all(h.current == OLD and h.daemon == OLD for h in fleet.values())


def test_the_wire_accounts_its_time_and_counts_hosts_in_flight() -> None:
    flight = Flight()
    host = SimHost("h1", wire=Wire(latency=0.001, bandwidth=1e6), flight=flight)
    host.call("", "ops.pointed", {})
    assert host.busy == pytest.approx(0.001)
    assert flight.peak == 1


def test_simulate_returns_its_figures(tmp_path: Path) -> None:
    figures = simulate(Simulation(20, Wire(latency=0.001), concurrency=8), tmp_path)
    assert set(figures) == set(FIGURES)
    assert figures["outcomes"] == {"validated": 20}
    assert figures["journal_bytes"] > 0 and figures["peak_threads"] >= 1
    assert 1 <= figures["peak_in_flight"] <= 8


def test_concurrency_below_one_is_refused_naming_the_key() -> None:
    with pytest.raises(ConfigError, match="concurrency") as info:
        load_playbook(LAB_PLAYBOOK, overrides=parse_set_options(("params_files=[]",)),
                      settings={"rolling.concurrency": 0})
    assert "rolling.concurrency" in str(info.value)
