"""The stop's last look before its signal (issue 27, review of its change): the host's
reading (actions/work.py arrived) and the controller's wait (WorkReport.without) follow one
rule for what a stuck job leaves busy; a stop at once never takes a busy reply for a result."""

from __future__ import annotations

import json
from typing import Any

import pytest

from rollout.host.reports import WorkReport
from rollout.host.scripts.actions import work as host_work
from rollout.host.scripts.actions.work import arrived, looked

GIB = 1 << 30
STUCK = {"job_id": "porep-1000-7", "proof_kind": "porep-c2", "started_secs_ago": 900,
         "total_partitions": 10, "partitions_done": 1,
         "partitions": [{"state": "done"}, {"state": "gpu"}] + [{"state": "pending"}] * 8}


def status(working: int = 0, queue: int = 0, more: tuple[dict[str, Any], ...] = ()
           ) -> dict[str, Any]:
    """A /status with the stuck job, `more` pipelines, the queue and working memory above
    the SRS (44 GiB)."""
    return {"pipelines": [STUCK, *more], "gpu_workers": [], "counters": {"queue_depth": queue},
            "memory": {"used_bytes": 44 * GIB + working},
            "allocations": {"srs": [{"bytes": 44 * GIB}]}}


NEW = {**STUCK, "job_id": "porep-1000-8", "partitions": [{"state": "synthesizing"}]}


@pytest.mark.parametrize(("doc", "grpc", "signals"), [
    (status(), None, True),  # the stuck job alone: the stop may signal
    (status(working=4 * GIB), None, False),  # a WindowPoSt in synthesis: memory alone
    (status(queue=1), None, False),
    (status(more=(NEW,)), None, False),
    (status(), {"jobs": [], "pending": 0}, True),
    (status(), {"jobs": [{"kind": "window-post", "id": "wdpost-1"}], "pending": 0}, False),
])
def test_the_host_and_the_controller_agree_on_what_a_stuck_job_leaves(
        doc: dict[str, Any], grpc: dict[str, Any] | None, signals: bool) -> None:
    look = looked(doc, grpc, True)
    stuck = tuple(j for j in WorkReport.parse(look).jobs if j.id == "porep-1000-7")
    controller = WorkReport.parse(look).without(stuck).outcome
    assert (arrived(look, ["porep-1000-7"]) == "") is signals
    assert (controller in ("idle", "no-answer")) is signals, controller


def test_a_signal_that_did_not_read_is_never_taken_for_idle_on_either_side() -> None:
    look = {"outcome": "busy", "reason": "r", "jobs": [{"kind": "porep-c2", "id": "s"}],
            "queue_depth": 0, "working_bytes": 0, "signals": {"status": "busy",
                                                              "grpc": "unknown"}}
    assert "the work is unknown" in arrived(look, ["s"])
    report = WorkReport.parse(look)
    assert report.without(report.jobs).outcome == "unknown"


def test_the_look_reads_status_last_right_before_the_signal(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """GetStatus may take seconds (cuzk runs nvidia-smi on each call): /status, which shows
    a PoRep from its registration, is read after it, nearest the signal."""
    order: list[str] = []
    monkeypatch.setattr(host_work, "_bench_look", lambda bench: order.append("grpc"))
    monkeypatch.setattr(host_work, "_status_answer",
                        lambda url: order.append("status") or json.dumps(status()))
    host_work.work("http://127.0.0.1:1/status", ["cuzk-bench"], "/nonexistent")
    assert order == ["grpc", "status"]
