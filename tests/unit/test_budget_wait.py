"""A validation proof whose job waits for cuzk's memory budget (visible in /status: its
partitions pending, the free budget below one partition) fails fast with that cause, not at
validate.timeout (issue 17): the host-side reading of /status (hostile data), the decision
(at once where nothing could release budget, after validate.budget_wait where other work
holds it), the proof stopped with its children, and the controller's message and data."""

from __future__ import annotations

import json
import os
import threading
import time
from collections.abc import Iterator
from dataclasses import replace
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from contexts import host_context, small_host
from processes import assert_ends

from rollout.host.layout import Layout
from rollout.host.reports import BudgetWait, Partitions, ProveReport
from rollout.host.scripts import ops
from rollout.host.scripts.actions import proving
from rollout.host.scripts.ops import budget_waiting
from rollout.steps.budget_wait import budget_wait_failure, watch_for
from rollout.steps.validate import run_bounded
from rollout.transport.local import LocalTransport

MIB = 1 << 20
GIB = 1 << 30
PART = 14 * GIB  # porep-32g's partition figure (kinds.yaml)


def job(job_id: str, states: list[str], age: float = 5.0, kind: str = "porep-c2") -> dict[str, Any]:
    """A /status pipelines entry as cuzk's status.rs writes it."""
    return {"job_id": job_id, "proof_kind": kind, "started_secs_ago": age,
            "total_partitions": len(states),
            "partitions_done": sum(1 for s in states if s == "done"),
            "partitions": [{"index": i, "state": s, "synth_ms": None, "gpu_ms": None}
                           for i, s in enumerate(states)]}


def status(pipelines: list[Any], total: Any = 100 * GIB, used: Any = 90 * GIB,
           srs: int = 44 * GIB, pce: int = 26 * GIB) -> dict[str, Any]:
    free = total - used if isinstance(total, int) and isinstance(used, int) else 0
    return {"uptime_secs": 60.0,
            "memory": {"total_bytes": total, "used_bytes": used, "available_bytes": free},
            "synthesis": {"max_concurrent": 11, "active": 1}, "pipelines": pipelines,
            "gpu_workers": [], "counters": {"queue_depth": 0},
            "allocations": {"srs": [{"circuit_id": "porep-32g", "bytes": srs,
                                     "last_used_secs_ago": 0.0, "evictable": False}],
                            "pce": [{"circuit_id": "porep-32g", "bytes": pce,
                                     "last_used_secs_ago": 1.0, "evictable": True}]}}


OTHER = job("curio-7", ["done", "done", "gpu"] + ["pending"] * 7, age=300.0)
MINE_ID = "0c0ffee0-5eed-4abc-8def-0123456789ab"  # cuzk-bench's id: a fresh UUID v4
MINE = job(MINE_ID, ["pending"] * 10, age=2.0)


# ------------------------------------------------------------------ the host's reading


def test_the_proofs_job_waits_while_another_job_holds_a_partition() -> None:
    seen = budget_waiting(status([OTHER, MINE]), ["curio-7"], PART)
    assert seen is not None and seen["releasable"] is True
    assert seen["job"]["id"] == MINE_ID and seen["job"]["pending"] == 10
    assert [o["id"] for o in seen["others"]] == ["curio-7"]
    assert seen["others"][0] == {"id": "curio-7", "kind": "porep-c2", "age": 300.0,
                                 "pending": 7, "active": 1, "done": 2, "total": 10,
                                 "ended": False}
    assert (seen["total"], seen["used"], seen["available"]) == (100 * GIB, 90 * GIB, 10 * GIB)
    assert seen["pinned"] == 70 * GIB and seen["partition"] == PART


def test_nothing_that_could_release_budget_means_not_releasable() -> None:
    """Only the SRS and PCE hold the budget and no other job runs: cuzk waits forever."""
    doc = status([MINE], total=80 * GIB, used=70 * GIB)
    seen = budget_waiting(doc, [], PART)
    assert seen is not None and seen["releasable"] is False and seen["others"] == []


def test_a_reservation_no_job_names_could_still_end() -> None:
    """More reserved than the SRS and PCE (cuzk's PCE extraction, say): releasable."""
    seen = budget_waiting(status([MINE], total=90 * GIB, used=84 * GIB), [], PART)
    assert seen is not None and seen["releasable"] is True and seen["others"] == []


def test_a_finished_job_still_listed_is_not_a_holder() -> None:
    finished = job("old", ["done"] * 10, age=40.0)
    seen = budget_waiting(status([finished, MINE], total=80 * GIB, used=70 * GIB), ["old"], PART)
    assert seen is not None and seen["others"] == [] and seen["releasable"] is False


@pytest.mark.parametrize("doc", [
    status([OTHER, MINE], used=80 * GIB),  # room for one partition: it will be dispatched
    status([OTHER, job(MINE_ID, ["synthesizing"] + ["pending"] * 9)]),  # it moves
    status([OTHER, job(MINE_ID, ["done"] * 10)]),  # it finished
    status([OTHER]),  # no new job yet (cuzk loads the SRS before it registers one)
])
def test_no_wait_is_seen_where_the_job_can_go_on_or_is_not_there(doc: dict[str, Any]) -> None:
    assert budget_waiting(doc, ["curio-7"], PART) is None


@pytest.mark.parametrize("doc", [
    None, "status", 42, [], {}, {"memory": None}, {"memory": "full"}, {"pipelines": "x"},
    status([MINE], total=True), status([MINE], total="100GiB"), status([MINE], total=1e11),
    status([MINE], total=-1), status([MINE], total=2**63), status([MINE], total=2**200),
    status([MINE], used=None), status([MINE], used=float("nan")),
    {**status([MINE]), "pipelines": [None, 7, "job", [], {"job_id": 5}]},
    {**status([MINE]), "memory": {"total_bytes": 100 * GIB, "used_bytes": 90 * GIB,
                                  "available_bytes": [10]}},
])
def test_a_foreign_or_mistyped_status_shows_no_wait(doc: Any) -> None:
    assert budget_waiting(doc, [], PART) is None


def test_hostile_entries_are_bounded_data() -> None:
    shell = "$(rm -rf /); `reboot` \x1b[31m" + "x" * 500
    odd = {"job_id": shell, "proof_kind": ["porep"], "started_secs_ago": float("inf"),
           "partitions": ["pending", {"state": "pending"}, {"state": {"x": 1}}, None] * 2000}
    doc = status([odd, job("holder", ["gpu"], age=True), MINE])
    doc["allocations"] = {"srs": [{"bytes": "44GiB"}, {"bytes": True}, {"bytes": 2**70}, 7],
                          "pce": "all"}
    seen = budget_waiting(doc, [], PART)
    assert seen is not None and seen["job"]["id"] == MINE_ID  # a foreign id is never its own
    parsed = proving._jobs(doc)[0]
    assert len(parsed["id"]) == 128 and parsed["kind"] == "?"  # as ops.work's
    assert parsed["age"] is None and parsed["pending"] == 1024  # the first 4096 entries
    assert seen["pinned"] == 0 and seen["others"][0]["age"] is None


def test_a_kind_without_a_partition_figure_or_a_zero_figure_is_never_watched() -> None:
    assert budget_waiting(status([MINE]), [], 0) is None
    settings = host_context().settings
    none = settings.model_copy(update={"validation": settings.validation.model_copy(
        update={"proof_kind": None})})
    assert watch_for(none) is None
    porep = settings.model_copy(update={"validation": settings.validation.model_copy(
        update={"proof_kind": "porep-32g", "budget_wait": 7})})
    assert watch_for(porep) == {"partition": float(PART), "wait": 7.0}


# ------------------------------------------------------------------ the proof, stopped


class StatusServer:
    """A scripted /status: `before` for the first answer (the look before the proof is
    submitted), `during` for every later one."""

    def __init__(self, before: dict[str, Any], during: dict[str, Any]) -> None:
        self.docs = [before, during]
        self.asked = 0
        server = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 (http.server's name)
                doc = server.docs[min(server.asked, 1)]
                server.asked += 1
                body = json.dumps(doc).encode()
                self.send_response(200)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: Any) -> None:
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()
        self.listen = f"127.0.0.1:{self.httpd.server_address[1]}"

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def fast_polls(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(proving, "BUDGET_POLL", 0.05)


@pytest.fixture
def served() -> Iterator[list[StatusServer]]:
    servers: list[StatusServer] = []
    yield servers
    for s in servers:
        s.close()


def prove(server: StatusServer, command: str, wait: float, timeout: float = 60) -> dict[str, Any]:
    return ops.prove(command, timeout, 0.5, status_url=f"http://{server.listen}/status",
                     watch={"partition": PART, "wait": wait})


def test_nothing_to_release_stops_the_proof_at_once_with_its_children(
    fast_polls: None, served: list[StatusServer], tmp_path: Path
) -> None:
    server = StatusServer(status([]), status([MINE], total=80 * GIB, used=70 * GIB))
    served.append(server)
    pids = tmp_path / "pids"
    began = time.monotonic()
    out = prove(server, f"sleep 300 & echo $! > {pids}; sleep 300; wait", wait=600)
    assert time.monotonic() - began < 20  # not the 600 s budget_wait, not the timeout
    assert out["outcome"] == "budget-wait" and out["passed"] is False
    waited = out["budget_wait"]
    assert waited["releasable"] is False and waited["job"]["id"] == MINE_ID
    assert waited["limit"] == 600
    child = int(pids.read_text())
    assert_ends(child, "outlived the stopped proof")


def test_other_work_holding_budget_gets_budget_wait_seconds_then_the_proof_stops(
    fast_polls: None, served: list[StatusServer]
) -> None:
    server = StatusServer(status([OTHER]), status([OTHER, MINE]))
    served.append(server)
    began = time.monotonic()
    out = prove(server, "sleep 300", wait=1.0)
    took = time.monotonic() - began
    assert out["outcome"] == "budget-wait" and 1.0 <= took < 20, took
    assert out["budget_wait"]["waited"] >= 1.0 and out["budget_wait"]["releasable"] is True
    assert [o["id"] for o in out["budget_wait"]["others"]] == ["curio-7"]


def test_a_proof_whose_job_goes_on_is_left_to_finish(
    fast_polls: None, served: list[StatusServer]
) -> None:
    moving = job(MINE_ID, ["synthesizing"] + ["pending"] * 9)
    server = StatusServer(status([OTHER]), status([OTHER, moving]))
    served.append(server)
    out = prove(server, "sleep 0.5; echo 'status:    COMPLETED'", wait=0)
    assert out["outcome"] == "ran" and out["exit"] == 0 and "budget_wait" not in out


def test_the_step_reports_the_wait_through_the_host_agent(
    served: list[StatusServer], tmp_path: Path
) -> None:
    """run_bounded as the validate step calls it: ops.prove on the host (its real 1 s
    polls), the report parsed on the controller into the failure's message and data."""
    server = StatusServer(status([OTHER]), status([OTHER, MINE]))
    served.append(server)
    ctx = host_context(small_host("local"), LocalTransport(), Layout(str(tmp_path)))
    s = ctx.settings
    settings = s.model_copy(update={
        "daemon": s.daemon.model_copy(update={"status_listen": server.listen}),
        "validation": s.validation.model_copy(update={"proof_kind": "porep-32g",
                                                      "budget_wait": 0.5})})
    began = time.monotonic()
    proof = run_bounded(replace(ctx, settings=settings), "sleep 300", 300)
    assert time.monotonic() - began < 30
    assert proof.budget_wait is not None and not proof.hung
    failure = budget_wait_failure(proof.budget_wait, "porep-32g", "out")
    assert "waits for cuzk's memory budget" in str(failure)
    assert "curio-7" in str(failure) and not failure.retryable


# ------------------------------------------------------------------ the controller's report


def block(**changes: Any) -> dict[str, Any]:
    seen = budget_waiting(status([OTHER, MINE]), ["curio-7"], PART)
    assert seen is not None
    seen.update(waited=121.0, limit=120.0)
    seen.update(changes)
    return seen


def test_the_failure_names_the_cause_every_figure_and_what_to_do() -> None:
    wait = BudgetWait.parse(block())
    assert wait is not None
    failure = budget_wait_failure(wait, "porep-32g", "tail")
    text = str(failure)
    assert "after 121 s (validate.budget_wait 120 s) with other work holding" in text
    assert f"job {MINE_ID} waits for cuzk's memory budget (10 partitions pending)" in text
    assert f"budget 100.0GiB ({100 * GIB} bytes) has 10.0GiB free" in text
    assert f"one porep-32g partition needs 14.0GiB ({PART} bytes)" in text
    assert f"one porep-32g proof needs 58.0GiB ({58 * GIB} bytes)" in text
    assert f"reserved 90.0GiB ({90 * GIB} bytes): SRS and PCE 70.0GiB" in text
    assert "porep-c2 curio-7 (running 300 s, 2/10 partitions done, 1 in flight)" in text
    assert "cordon the host (work.cordon) or let its work finish" in text
    assert "larger budget (daemon.total_budget" in text
    assert not failure.retryable and failure.output == "tail"
    assert failure.data["budget_total"] == 100 * GIB and failure.data["proof_need"] == 58 * GIB
    assert failure.data["holders"][0]["id"] == "curio-7"
    assert failure.data["job"]["id"] == MINE_ID and failure.data["waited"] == 121.0
    json.dumps(failure.data)  # plain data for the step's event


def test_nothing_to_release_says_at_once_and_only_a_larger_budget() -> None:
    wait = BudgetWait.parse(block(others=[], releasable=False, used=70 * GIB, waited=1.0))
    assert wait is not None
    text = str(budget_wait_failure(wait, "lab-porep", ""))
    assert "at once: nothing holds budget that could be released" in text
    assert "cordon" not in text and "larger budget" in text
    assert "one lab-porep partition needs" in text and "one lab-porep proof needs" in text
    assert "work /status names no job for" in text


@pytest.mark.parametrize("changes", [
    {"job": None}, {"job": MINE_ID}, {"total": "100GiB"}, {"used": True}, {"waited": None},
    {"limit": -1}, {"available": 2**64}, {"partition": 1.5},
])
def test_a_mistyped_block_is_no_budget_wait(changes: dict[str, Any]) -> None:
    assert BudgetWait.parse(block(**changes)) is None
    assert BudgetWait.parse(None) is None and BudgetWait.parse([block()]) is None


def test_hostile_names_in_the_block_are_printable_and_bounded() -> None:
    others = [{"id": "a\x1b[2Jb\nc" + "y" * 300, "kind": "$(id)", "age": "old",
               "active": -3, "done": "x", "total": 2**70}] * 40 + ["junk", 7]
    wait = BudgetWait.parse(block(others=others))
    assert wait is not None and len(wait.others) == 32
    text = str(budget_wait_failure(wait, "porep-32g", ""))
    assert "\x1b" not in text and "\n" not in text and "and 27 more" in text
    assert wait.others[0].id.startswith("a?[2Jb?c") and len(wait.others[0].id) == 80
    assert wait.others[0].age is None and wait.others[0].partitions == Partitions(0, 0, 0)
    assert os.linesep not in text


def test_the_report_carries_the_block_only_with_its_outcome() -> None:
    report = {"outcome": "budget-wait", "exit": 143, "budget_wait": block()}
    assert ProveReport.parse(report).budget_wait == BudgetWait.parse(block()) is not None
    assert ProveReport.parse({**report, "outcome": "ran"}).budget_wait is None
    assert ProveReport.parse({**report, "budget_wait": "stop"}).budget_wait is None
    assert ProveReport.parse({**report, "budget_wait": {}}).budget_wait is None
