"""A dead supervisor is shown: nothing would restart the daemon on that host."""

from __future__ import annotations

from rollout.commands.status import supervisor_state, table_row
from rollout.host.facts import HostFacts


def test_dead_supervisor_is_reported_over_its_stale_state_file() -> None:
    facts = HostFacts.parse({"supervisor": {"pid": 41, "alive": False, "state": "running"}})
    assert supervisor_state(facts) == "dead"


def test_live_supervisor_reports_its_state() -> None:
    live = HostFacts.parse({"supervisor": {"pid": 41, "alive": True, "state": "held"}})
    assert supervisor_state(live) == "held"
    assert supervisor_state(HostFacts.parse({})) is None


def test_table_shows_the_dead_supervisor_beside_the_state() -> None:
    row = {"host": "h", "state": "stopped", "supervisor": "dead"}
    assert table_row(row, 0.0)["state"] == "stopped (supervisor dead)"
