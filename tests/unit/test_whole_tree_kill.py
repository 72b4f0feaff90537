"""A whole-tree kill (daemon and supervisor SIGKILLed at once) is named from its evidence."""

from __future__ import annotations

from typing import Any

from rollout.commands.diagnose import EXTERNAL_SIGKILL, OOM_KILL, classify
from rollout.commands.status import daemon_state
from rollout.host.facts import HostFacts


def facts(**over: Any) -> HostFacts:
    raw = {"supervisor": {"pid": 10, "alive": False, "state": "running"},
           "daemon": {"state": "gone", "pid": 20, "note": "pid 20 gone"},
           "last_start": {"time": 1000.0}, **over}
    return HostFacts.parse(raw)


def diag(oom_kill: int = 0, container: float = 500.0) -> dict[str, Any]:
    return {"supervisor_state": {"state": "running", "updated": 1100.0,
                                 "oom": {"oom": 0, "oom_kill": 0}},
            "cgroup": {"version": 2, "events": {"oom": oom_kill, "oom_kill": oom_kill}},
            "starts": [{"time": 1000.0}], "exits": [{"time": 900.0, "held": True}],
            "log": {"exists": True, "tail": [{"line": "INFO proof done", "run": 0}]},
            "container": {"started_at": container}}


def test_daemon_and_supervisor_gone_without_exit_record_is_external_sigkill() -> None:
    v = classify(facts(), diag())
    assert v.cause == EXTERNAL_SIGKILL and "(supervisor killed too)" in v.summary
    text = " ".join(v.evidence)
    assert "last heartbeat" in text and "without a shutdown line" in text
    assert "OOM counters unchanged" in text and "container up since" in text
    assert daemon_state(facts()) == "dead"


def test_a_restarted_container_is_named() -> None:
    v = classify(facts(), diag(container=1200.0))
    assert v.cause == EXTERNAL_SIGKILL and v.summary.startswith("container restarted")


def test_oom_counters_that_rose_make_it_an_oom_kill() -> None:
    assert classify(facts(), diag(oom_kill=1)).cause == OOM_KILL


def test_a_live_supervisor_or_a_recorded_exit_is_not_a_whole_tree_kill() -> None:
    alive = facts(supervisor={"pid": 10, "alive": True, "state": "backoff"})
    assert "supervisor killed too" not in classify(alive, diag()).summary
    recorded = diag()
    recorded["exits"] = [{"time": 1050.0, "signal": "SIGKILL", "held": False}]
    assert "supervisor killed too" not in classify(facts(), recorded).summary
