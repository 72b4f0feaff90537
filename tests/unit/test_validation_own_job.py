"""The validation's budget watch follows its own job (issue 27), never the job that merely
arrived with it. cuzk's /status names no caller; cuzk-bench `single` cannot be given an id
(it names its job with a fresh UUID v4, curio names its jobs porep-<miner>-<sector>, ...), so
the job is the validation's by that form, by appearing after the proof was submitted and by
having registered since: a table of /status snapshots through the pure picking function, and
the watch on the host firing on the right job where curio's arrived first."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest
from test_budget_wait import PART, StatusServer, job, status

from rollout.host.scripts import ops
from rollout.host.scripts.actions import proving
from rollout.host.scripts.ops import budget_waiting

MINE = "5d3c1a2b-0e4f-4a6b-9c8d-7e6f5a4b3c2d"  # what cuzk-bench's Uuid::new_v4 looks like
BENCH = "a1b2c3d4-e5f6-4789-8abc-def012345678"  # another cuzk-bench at the same moment
WAITING = ["pending"] * 10
MOVING = ["synthesizing"] + ["pending"] * 9
HOLDER = job("porep-1000-7", ["done", "gpu"] + ["pending"] * 8, age=90.0)

# (the case, /status pipelines, ids listed before submission, seconds since then,
#  the jobs that can be the validation's, the job the watch says waits: None = no wait)
CASES: list[tuple[str, list[dict[str, Any]], list[str], float | None, list[str], str | None]] = [
    ("curio-registers-first-and-moves",  # today's rule took it and never fired
     [HOLDER, job("porep-1000-8", MOVING, age=3.0), job(MINE, WAITING, age=2.5)],
     ["porep-1000-7"], 4.0, [MINE], MINE),
    ("curio-arrives-with-it-and-waits",
     [HOLDER, job("porep-1000-8", WAITING, age=2.9), job(MINE, WAITING, age=2.8)],
     ["porep-1000-7"], 4.0, [MINE], MINE),
    ("own-not-registered-yet",  # the SRS loads; curio's new job waits: not the proof's
     [HOLDER, job("porep-1000-8", WAITING, age=1.0)], ["porep-1000-7"], 2.0, [], None),
    ("own-moves-curio-waits",
     [job("porep-1000-8", WAITING, age=3.0), job(MINE, MOVING, age=2.0), HOLDER],
     ["porep-1000-7"], 4.0, [MINE], None),
    ("curio-reuses-a-listed-id",  # re-registered: never the proof's
     [job("porep-1000-7", WAITING, age=0.5), job(MINE, MOVING, age=1.0)],
     ["porep-1000-7"], 2.0, [MINE], None),
    ("earlier-validation-still-queued",
     [HOLDER, job(BENCH, WAITING, age=50.0), job(MINE, WAITING, age=1.0)],
     ["porep-1000-7", BENCH], 2.0, [MINE], MINE),
    ("no-status-before-older-bench-job",  # registered before the proof began
     [HOLDER, job(BENCH, MOVING, age=50.0), job(MINE, WAITING, age=1.0)], [], 2.0,
     [MINE], MINE),
    ("two-bench-jobs-one-moves",  # either could be the proof's: no wait
     [HOLDER, job(BENCH, MOVING, age=2.0), job(MINE, WAITING, age=1.9)],
     ["porep-1000-7"], 3.0, [BENCH, MINE], None),
    ("two-bench-jobs-both-wait",  # the proof's waits, whichever it is
     [HOLDER, job(BENCH, WAITING, age=2.0), job(MINE, WAITING, age=1.9)],
     ["porep-1000-7"], 3.0, [BENCH, MINE], BENCH),
    ("bench-jobs-that-ended",  # cuzk answered their callers
     [HOLDER, job(BENCH, ["done"] * 10, age=2.0),
      job("b" + MINE[1:], ["failed"] + WAITING[1:], age=1.0), job(MINE, WAITING, age=1.0)],
     ["porep-1000-7"], 3.0, [MINE], MINE),
    ("ids-of-other-forms",  # upper case, version 1, braces, a suffix, a number
     [HOLDER, job(MINE.upper(), WAITING, age=1.0),
      job("5d3c1a2b-0e4f-1a6b-9c8d-7e6f5a4b3c2d", WAITING, age=1.0),
      job("{" + MINE + "}", WAITING, age=1.0), job(MINE + "-x", WAITING, age=1.0),
      {**job("x", WAITING, age=1.0), "job_id": 51234}],
     ["porep-1000-7"], 3.0, [], None),
    ("no-age-is-no-evidence-against",
     [HOLDER, {**job(MINE, WAITING), "started_secs_ago": "soon"}], [], 3.0, [MINE], MINE),
]


@pytest.mark.parametrize(("pipelines", "before", "elapsed", "own", "waits"),
                         [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_the_watch_picks_the_validations_own_job(
    pipelines: list[dict[str, Any]], before: list[str], elapsed: float | None,
    own: list[str], waits: str | None
) -> None:
    doc = status(pipelines)  # 10 GiB free: below one partition
    assert [j["id"] for j in proving.own_jobs(proving._jobs(doc), before, elapsed)] == own
    seen = budget_waiting(doc, before, PART, elapsed)
    assert (seen["job"]["id"] if seen else None) == waits
    if seen is not None:  # the holders named are the jobs that hold a partition
        assert [o["id"] for o in seen["others"]] == [
            j["job_id"] for j in pipelines if {"gpu", "synthesizing"} & {
                p["state"] for p in j["partitions"]}]


@pytest.fixture
def served() -> Iterator[list[StatusServer]]:
    servers: list[StatusServer] = []
    yield servers
    for s in servers:
        s.close()


def test_the_watch_fires_on_its_own_job_where_curios_arrived_first(
    monkeypatch: pytest.MonkeyPatch, served: list[StatusServer]
) -> None:
    """Today's rule took the oldest new job (curio's, which moves) and never fired."""
    monkeypatch.setattr(proving, "BUDGET_POLL", 0.05)
    curio = job("porep-1000-8", MOVING, age=0.4)
    server = StatusServer(status([HOLDER]), status([HOLDER, curio, job(MINE, WAITING, 0.3)]))
    served.append(server)
    began = time.monotonic()
    out = ops.prove("sleep 300", 60, 0.5, status_url=f"http://{server.listen}/status",
                    watch={"partition": PART, "wait": 0.5})
    assert time.monotonic() - began < 20
    assert out["outcome"] == "budget-wait" and out["budget_wait"]["job"]["id"] == MINE
    assert [o["id"] for o in out["budget_wait"]["others"]] == ["porep-1000-7", "porep-1000-8"]
