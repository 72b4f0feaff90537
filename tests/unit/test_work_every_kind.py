"""Work in flight of every kind, and stuck jobs (issue 27): ops.work reads every signal
cuzk gives (/status, GetStatus as `cuzk-bench status` prints it, the working memory above
the SRS and PCE), idle only where every signal that answered says so; a daemon that runs and
answers none is unknown and waited on; a job with no progress for work.stuck_after is named
stuck and, with work.on_stuck roll, not waited for."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest
from test_work import work_context

from rollout.config.playbook import LAB_PLAYBOOK, parse_set_options
from rollout.errors import ConfigError, StepFailed
from rollout.host.reports import Job, WorkReport
from rollout.host.scripts.actions import work as host_work
from rollout.steps.base import HostContext
from rollout.steps.decision import Phase
from rollout.steps.kinds import load_playbook
from rollout.steps.work import (
    Progress,
    WorkHow,
    before_stop,
    look_text,
    stuck_jobs,
    track,
    verdict,
    wait_for_work,
    work_how,
)
from rollout.transport.base import RunResult

MIB = 1 << 20
SRS = {"srs": [{"circuit_id": "porep-32g", "bytes": 47 * MIB}], "pce": []}


def part(*states: str) -> list[dict[str, Any]]:
    return [{"index": i, "state": s} for i, s in enumerate(states)]


def pipeline(job: str, *states: str) -> dict[str, Any]:
    return {"job_id": job, "proof_kind": "porep-c2", "started_secs_ago": 50.0,
            "total_partitions": len(states),
            "partitions_done": sum(s == "done" for s in states), "partitions": part(*states)}


def status(pipelines: Any = (), workers: Any = (), depth: int = 0, used: int = 47 * MIB,
           allocations: Any = None) -> dict[str, Any]:
    return {"memory": {"total_bytes": 500 * MIB, "used_bytes": used,
                       "available_bytes": 500 * MIB - used},
            "pipelines": list(pipelines), "gpu_workers": list(workers),
            "allocations": SRS if allocations is None else allocations,
            "counters": {"queue_depth": depth}}


BENCH = """\
=== cuzk daemon status ===
uptime:           812s
proofs completed: 40
proofs failed:    1
pinned memory:    0 / 0 bytes

GPUs:
  [0] NVIDIA GeForce RTX 4090 \u2014 1200 MiB / 24564 MiB VRAM \u2014 {job}
  [0] NVIDIA GeForce RTX 4090 \u2014 1200 MiB / 24564 MiB VRAM \u2014 idle
{queues}"""
POST_ON_GPU = BENCH.format(job="proving window-post (wdpost-1)", queues="")
BENCH_IDLE = BENCH.format(job="idle", queues="")


# ---------------------------------------------------------------- the host's reading


def test_getstatus_as_cuzk_bench_prints_it_names_each_job_on_a_gpu_and_the_queue() -> None:
    queues = ("\nQueues:\n  window-post: pending=2, in_progress=1\n"
              "  porep-c2: pending=1, in_progress=1\n")
    out = host_work.bench_status(BENCH.format(job="proving window-post (wdpost-1)",
                                              queues=queues))
    assert out is not None and out["pending"] == 3
    assert [(j["kind"], j["id"]) for j in out["jobs"]] == [("window-post", "wdpost-1"),
                                                           ("porep-c2", "?")]
    assert host_work.bench_status(BENCH_IDLE) == {"jobs": [], "pending": 0}


@pytest.mark.parametrize("text", [
    "", "Error: failed to connect to daemon", "uptime: 3s\nGPUs:\n  [0] x \u2014 proving a (b)",
    BENCH.format(job="proving $(reboot) (;rm -rf)", queues="") + "\n" * 5000 + "x" * 10**5,
])
def test_a_bench_answer_is_hostile_text(text: str) -> None:
    out = host_work.bench_status(text)
    assert out is None or all(len(j["id"]) <= 128 and len(j["kind"]) <= 40 for j in out["jobs"])
    if out is not None:
        report = WorkReport.parse(host_work.looked(None, out, True))
        assert all(j.id.isprintable() for j in report.jobs)


def test_working_memory_is_the_budget_in_use_above_the_srs_and_pce_allocations() -> None:
    assert host_work.working_bytes(status()) == 0
    assert host_work.working_bytes(status(used=61 * MIB)) == 14 * MIB
    assert host_work.working_bytes(status(used=10 * MIB)) == 0
    assert host_work.working_bytes({"memory": {"used_bytes": "lots"}}) is None
    assert host_work.working_bytes(None) is None


IDLE, BUSY = status(), status([pipeline("j-1", "done", "gpu")])
POST_MEMORY = status(used=61 * MIB)  # a WindowPoSt in synthesis: only its memory shows it
LOADING = status(used=47 * MIB, allocations={"srs": [], "pce": []})  # a PoRep's SRS load
GRPC_POST = host_work.bench_status(POST_ON_GPU)
GRPC_IDLE = host_work.bench_status(BENCH_IDLE)


@pytest.mark.parametrize(("doc", "grpc", "running", "want"), [
    (IDLE, GRPC_IDLE, True, "idle"),
    (IDLE, None, True, "idle"),  # the bench did not answer: the others that did decide
    (None, GRPC_IDLE, True, "idle"),  # the status port is off
    (IDLE, GRPC_POST, True, "busy"),  # a WindowPoSt on the GPU: absent from /status
    (POST_MEMORY, GRPC_IDLE, True, "busy"),  # a WindowPoSt in synthesis
    (LOADING, None, True, "busy"),  # a PoRep while a fresh daemon loads its SRS
    (BUSY, GRPC_IDLE, True, "busy"),
    (status(depth=2), None, True, "busy"),
    (None, None, True, "unknown"),  # a daemon runs and answers nothing: never idle
    (None, None, False, "no-answer"),  # no daemon at all
    ("not json", None, True, "unknown"),
    ("not json", GRPC_IDLE, True, "unknown"),
    ("not json", GRPC_POST, True, "busy"),
])
def test_idle_only_where_every_signal_that_answered_says_so(
        doc: Any, grpc: Any, running: bool, want: str) -> None:
    out = host_work.looked(doc, grpc, running)
    assert out["outcome"] == want, out
    assert WorkReport.parse(json.loads(json.dumps(out))).outcome == want


def test_a_job_seen_by_status_and_getstatus_is_named_once() -> None:
    gpu = host_work.bench_status(BENCH.format(job="proving porep-c2 (porep-10)", queues=""))
    out = host_work.looked(status([pipeline("porep-1000-7", "gpu")]), gpu, True)
    assert [j["id"] for j in out["jobs"]] == ["porep-1000-7"]
    assert out["signals"] == {"status": "busy", "grpc": "busy", "memory": "idle"}


def test_a_pipelines_steps_grow_at_every_partition_move_and_nothing_else() -> None:
    order = ["pending", "synthesizing", "synth_done", "gpu", "done"]
    steps = [host_work._steps({"partitions": part(s, "pending")}) or 0 for s in order]
    assert steps == sorted(set(steps)) and steps[0] == 0
    assert host_work._steps({"partitions": "failed"}) is None
    assert host_work._steps({"partitions": [None, {"state": ["x"]}, {"state": "gpu"}]}) == 3


def fake_proc(tmp: Path, running: bool) -> str:
    """A /proc with one process: a cuzk daemon when `running`, else a shell."""
    pid = tmp / "proc" / "4242"
    pid.mkdir(parents=True)
    name = "cuzk-daemon" if running else "sh"
    (pid / "cmdline").write_bytes(f"/data/current/{name}\0-c\0/data/zk/cuzk.toml\0".encode())
    (pid / "stat").write_text(f"4242 ({name}) S 1 4242 4242 0 -1 0 " + "0 " * 40)
    (pid / "comm").write_text(name + "\n")
    return str(tmp / "proc")


def bench_script(tmp: Path, text: str, code: int = 0) -> str:
    path = tmp / "cuzk-bench"
    path.write_text(f"#!/bin/sh\ncat <<'EOF'\n{text}\nEOF\nexit {code}\n")
    path.chmod(0o755)
    return str(path)


def test_ops_work_asks_the_bench_and_tells_a_silent_daemon_from_none(tmp_path: Path) -> None:
    silent = "http://127.0.0.1:9/status"
    bench = bench_script(tmp_path, POST_ON_GPU)
    out = host_work.work(silent, [bench, "-a", "http://127.0.0.1:9", "status"],
                         fake_proc(tmp_path / "a", True))
    assert out["outcome"] == "busy" and out["jobs"][0]["kind"] == "window-post"
    assert host_work.work(silent, [], fake_proc(tmp_path / "b", True))["outcome"] == "unknown"
    assert host_work.work(silent, [], fake_proc(tmp_path / "c", False))["outcome"] == "no-answer"
    failed = bench_script(tmp_path, BENCH_IDLE, code=1)  # exit 1: it did not answer
    assert host_work.work(silent, [failed], fake_proc(tmp_path / "d", True))["outcome"] \
        == "unknown"
    missing = [str(tmp_path / "nothing-here"), "status"]
    assert host_work.work(silent, missing, fake_proc(tmp_path / "e", False))["outcome"] \
        == "no-answer"


# ---------------------------------------------------------------- the controller's decisions

J1, J2 = Job("porep-c2", "j-1", 50.0, steps=4), Job("porep-c2", "j-2", 9.0, steps=1)
UNTRACKED = Job("window-post", "wdpost-1", None)


@pytest.mark.parametrize(("before", "jobs", "waited", "want"), [
    ({}, (J1,), 0.0, {"j-1": Progress(4, 0.0)}),  # first seen: from now
    ({"j-1": Progress(4, 0.0)}, (J1,), 5.0, {"j-1": Progress(4, 0.0)}),  # no move: kept
    ({"j-1": Progress(3, 0.0)}, (J1,), 5.0, {"j-1": Progress(4, 5.0)}),  # moved: from now
    ({"j-1": Progress(4, 0.0)}, (J2,), 5.0, {"j-2": Progress(1, 5.0)}),  # j-1 ended: gone
    ({}, (UNTRACKED,), 5.0, {}),  # GetStatus's jobs have no steps: never tracked
])
def test_progress_is_kept_from_the_previous_look(
        before: dict[str, Progress], jobs: tuple[Job, ...], waited: float,
        want: dict[str, Progress]) -> None:
    assert track(before, jobs, waited) == want


@pytest.mark.parametrize(("tracked", "waited", "after", "want"), [
    ({"j-1": Progress(4, 0.0)}, 29.9, 30, ()),
    ({"j-1": Progress(4, 0.0)}, 30.0, 30, ("j-1",)),
    ({"j-1": Progress(4, 0.0), "j-2": Progress(1, 20.0)}, 30.0, 30, ("j-1",)),
    ({}, 1000.0, 30, ()),  # nothing tracked (a PoSt on the GPU): never stuck
])
def test_a_job_is_stuck_after_stuck_after_seconds_without_progress(
        tracked: dict[str, Progress], waited: float, after: float,
        want: tuple[str, ...]) -> None:
    assert tuple(j.id for j in stuck_jobs((J1, J2, UNTRACKED), tracked, waited, after)) == want


HOW = WorkHow("", "", deadline=60, interval=10, at_deadline="skip", timeout=5, status_url="",
              cordon_takes=0)


@pytest.mark.parametrize(("report", "stuck", "want"), [
    (WorkReport("busy", "", (J1,), 0, 0, {"status": "busy"}), (J1,), "idle"),
    (WorkReport("busy", "", (J1, J2), 0, 0, {"status": "busy"}), (J1,), "busy"),
    (WorkReport("busy", "", (J1,), 2, 0, {"status": "busy"}), (J1,), "busy"),  # a queue
    (WorkReport("busy", "", (J1,), 0, MIB, {"memory": "busy"}), (J1,), "busy"),  # memory
    (WorkReport("busy", "", (J1,), 0, 0, {"status": "busy", "grpc": "unknown"}), (J1,),
     "unknown"),
    (WorkReport("busy", "", (J1, UNTRACKED), 0, 0, {}), (J1,), "busy"),  # a PoSt on the GPU
])
def test_a_look_without_its_stuck_jobs(report: WorkReport, stuck: tuple[Job, ...],
                                       want: str) -> None:
    rest = report.without(stuck)
    assert rest.outcome == want and not {j.id for j in stuck} & {j.id for j in rest.jobs}


@pytest.mark.parametrize(("outcome", "waited", "want"), [
    ("unknown", 0, "wait"), ("unknown", 60, "skip"), ("no-answer", 0, "go"),
    ("idle", 0, "go"), ("busy", 59, "wait"),
])
def test_unknown_waits_as_busy_does(outcome: str, waited: float, want: str) -> None:
    assert verdict(WorkReport(outcome, "", (), None), waited, HOW) == want


def test_a_look_says_what_no_job_names() -> None:
    memory = WorkReport("busy", "", (), 0, 14 * MIB, {"memory": "busy"})
    assert look_text(memory) == ("no job; queue 0; 14.0 MiB of working memory above the SRS "
                                 "and PCE")
    silent = WorkReport("unknown", "the daemon runs but answers no signal", (), None)
    assert look_text(silent) == "work unknown (the daemon runs but answers no signal)"


# ---------------------------------------------------------------- the wait on a scripted host


class Looks:
    """A host whose ops.work answers each look from a list (ops.work's own reading of the
    signals given); every other call succeeds."""

    def __init__(self, looks: list[tuple[Any, Any, bool]]) -> None:
        self.looks = looks
        self.calls: list[tuple[str, dict[str, Any]]] = []

    def call(self, source: str, call: str, kwargs: Any, timeout: float | None = None
             ) -> RunResult:
        self.calls.append((call, dict(kwargs)))
        if call == "ops.work":
            report = host_work.looked(*(self.looks.pop(0) if self.looks else (IDLE, None, True)))
        else:
            report = {"outcome": call.removeprefix("ops.") + "ed", "reason": "ok"}
        return RunResult(call, 0, json.dumps(report) + "\n", "")


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds


def waiting(looks: list[tuple[Any, Any, bool]], **settings: Any
            ) -> tuple[HostContext, Looks, list[dict[str, Any]]]:
    transport = Looks(looks)
    ctx, events = work_context(transport, **settings)
    return ctx, transport, events


def test_a_windowpost_absent_from_status_is_waited_for() -> None:
    looks = [(IDLE, GRPC_POST, True)] * 5 + [(POST_MEMORY, GRPC_IDLE, True)] * 3
    ctx, host, events = waiting(looks)
    clock = Clock()
    done = wait_for_work(ctx, work_how(ctx.target, "http://x/status"), clock, clock.sleep)
    assert done.verdict == "go" and clock.now >= 8
    assert [j.id for j in done.waited_on] == ["wdpost-1"]
    bench = host.calls[0][1]["bench"]
    assert bench == ["/data/current/cuzk-bench", "-a", "http://127.0.0.1:9820", "status"]


def test_a_daemon_that_answers_nothing_is_waited_on_until_the_deadline() -> None:
    ctx, _, events = waiting([(None, None, True)] * 100, **{
        "work.deadline": 5, "work.at_deadline": "stop"})
    clock = Clock()
    done = wait_for_work(ctx, work_how(ctx.target, "http://x/status"), clock, clock.sleep)
    assert done.verdict == "stop" and clock.now >= 5
    assert "with the daemon's work unknown" in events[-1]["reason"]


def stuck_looks(n: int) -> list[tuple[Any, Any, bool]]:
    """cuzk after a GPU partition failure: the job stays in pipelines, a partition in gpu,
    the others pending, a worker's current_job on it (engine.rs's GPU error path)."""
    worker = {"worker_id": 0, "current_job": "j-s", "busy_secs": 400.0}
    return [(status([pipeline("j-s", "done", "gpu", "pending")], [worker]), GRPC_IDLE,
             True)] * n


def test_a_stuck_job_is_named_and_rolled_within_stuck_after() -> None:
    ctx, _, events = waiting(stuck_looks(1000), **{
        "work.deadline": 600, "work.stuck_after": 20, "work.at_deadline": "skip"})
    clock = Clock()
    done = wait_for_work(ctx, work_how(ctx.target, "http://x/status"), clock, clock.sleep)
    assert done.verdict == "go" and 20 <= clock.now < 25
    named = [e for e in events if e["reason"].startswith("job stuck")]
    assert len(named) == 1 and "porep-c2 j-s (age 50s, no progress for 20s)" in \
        named[0]["reason"]
    assert done.data()["stuck"] == [{"kind": "porep-c2", "id": "j-s", "age": 50.0,
                                     "no_progress_for": 20.0}]
    assert "1 job(s) stuck, not waited for: porep-c2 j-s" in done.describe()
    assert not done.waited_on  # it never ended: not "waited for it to end"


def test_a_stuck_job_does_not_hide_the_others() -> None:
    moving = [(status([pipeline("j-s", "done", "gpu"), pipeline("j-2", *["done"] * i, "gpu")]),
               None, True) for i in range(40)]
    ctx, _, _ = waiting(moving + [(IDLE, None, True)], **{"work.stuck_after": 10,
                                                          "work.deadline": 100})
    clock = Clock()
    done = wait_for_work(ctx, work_how(ctx.target, "http://x/status"), clock, clock.sleep)
    assert done.verdict == "go" and clock.now >= 40  # j-2 moved at every look: waited for
    assert [s.job.id for s in done.stuck] == ["j-s"]


def test_on_stuck_skip_leaves_the_host_untouched_at_once() -> None:
    ctx, _, _ = waiting(stuck_looks(1000), **{"work.stuck_after": 20, "work.on_stuck": "skip",
                                              "work.cordon": "curio cordon",
                                              "work.uncordon": "curio uncordon"})
    ctx.state.phase = Phase.STOPPED
    clock = Clock()
    with pytest.raises(StepFailed) as e:
        before_stop(ctx, work_how(ctx.target, "http://x/status"), clock, clock.sleep)
    assert e.value.data["busy"] is True and e.value.data["stuck"][0]["id"] == "j-s"
    assert "work.on_stuck: skip" in str(e.value) and clock.now < 600
    assert ctx.state.phase is Phase.UNTOUCHED


@pytest.mark.parametrize(("key", "value"), [("work.on_stuck", "wait"),
                                            ("work.stuck_after", 0),
                                            ("work.bench", "../bin/sh")])
def test_the_stuck_settings_are_checked_at_load(key: str, value: Any) -> None:
    with pytest.raises(ConfigError, match=key.split(".")[1]):
        load_playbook(LAB_PLAYBOOK, overrides=parse_set_options(("params_files=[]",)),
                      settings={key: value})


def test_no_bench_no_getstatus_look() -> None:
    ctx, _, _ = waiting([], **{"work.bench": None})
    assert work_how(ctx.target, "http://x/status").bench == ()
    assert os.sep not in (ctx.settings.work.bench or "")


def test_work_no_job_names_is_waited_for_and_said() -> None:
    ctx, _, _ = waiting([(LOADING, GRPC_IDLE, True)] * 4)
    clock = Clock()
    done = wait_for_work(ctx, work_how(ctx.target, "http://x/status"), clock, clock.sleep)
    assert done.verdict == "go" and clock.now >= 4 and not done.waited_on
    assert done.describe().startswith("waited 4.0s for work in flight that no job names")


def test_a_transient_held_for_life_is_waited_on_and_named_at_the_deadline() -> None:
    """An old daemon whose budget cannot cache the PCE holds the extraction's 14 GiB for
    life, no job named (issue 27 review, 8). As much as a WindowPoSt partition in synthesis
    reserves: never taken for idle, but the skip names the cause and the fix."""
    held = status(used=47 * MIB + 15032385536)
    ctx, _, _ = waiting([(held, GRPC_IDLE, True)] * 1000, **{
        "work.deadline": 30, "work.at_deadline": "skip", "work.cordon": "curio cordon",
        "work.uncordon": "curio uncordon"})
    ctx.state.phase = Phase.STOPPED
    clock = Clock()
    with pytest.raises(StepFailed) as e:
        before_stop(ctx, work_how(ctx.target, "http://x/status"), clock, clock.sleep)
    assert clock.now >= 30 and e.value.data["busy"] is True
    assert ("14.0GiB of working memory with no job named, one PCE extraction's reservation"
            in str(e.value)) and "raise daemon.total_budget" in str(e.value)


# ---------------------------------------------------------------- one job, two names


@pytest.mark.parametrize(("a", "b", "a_seen", "b_seen", "same"), [
    ("curio-lab-1-1", "curio-lab-1-1", "status", "status", True),
    ("curio-la", "curio-lab-1-1", "grpc", "status", True),  # cuzk-bench's first 8
    ("curio-lab-1-1", "curio-la", "status", "grpc", True),
    ("curio-la", "curio-lab-1-1", "status", "status", False),  # /status never cuts an id
    ("curio-l", "curio-lab-1-1", "grpc", "status", False),  # 7: a whole id, not a cut one
    ("curio-lb", "curio-lab-1-1", "grpc", "status", False),
    ("?", "?", "grpc", "grpc", False),  # two jobs no line names are two
])
def test_one_job_is_named_by_its_id_or_by_what_cuzk_bench_prints_of_it(
        a: str, b: str, a_seen: str, b_seen: str, same: bool) -> None:
    assert host_work.same_job(a, b, a_seen, b_seen) is same
    assert Job(kind="porep-c2", id=a, age=None, seen=a_seen).same(
        Job(kind="porep-c2", id=b, age=None, seen=b_seen)) is same


def bench_proving(job: str) -> str:
    return BENCH.format(job=f"proving porep-c2 ({job[:8]})", queues="")


def test_a_job_named_by_status_then_by_getstatus_alone_is_one_job() -> None:
    """The lab's failure (ci12, ci14): a look where /status names the proof, then one where
    only GetStatus still shows it on its GPU (by its first 8 characters, /status having
    moved on): one job waited on, by its whole id, none arrived since the cordon."""
    whole = "curio-lab-1-1"
    shown = status([pipeline(whole, "gpu")], used=60 * MIB)
    cut = host_work.bench_status(bench_proving(whole))
    looks = [(shown, cut, True), (status(), cut, True), (IDLE, GRPC_IDLE, True)]
    ctx, _, _ = waiting(looks)
    clock = Clock()
    done = wait_for_work(ctx, work_how(ctx.target, "http://x/status"), clock, clock.sleep)
    assert done.verdict == "go"
    assert [j.id for j in done.waited_on] == [whole], done.waited_on
    assert not done.new  # the cut name is no job that arrived after the first look
    assert whole in done.describe() and "curio-la " not in done.describe()


def test_the_jobs_waited_on_are_said_in_the_order_first_seen() -> None:
    looks = [(status([pipeline("j-b", "gpu")]), None, True),
             (status([pipeline("j-a", "gpu"), pipeline("j-b", "gpu")]), None, True),
             (IDLE, None, True)]
    ctx, _, _ = waiting(looks)
    clock = Clock()
    done = wait_for_work(ctx, work_how(ctx.target, "http://x/status"), clock, clock.sleep)
    assert [j.id for j in done.waited_on] == ["j-b", "j-a"]


def test_a_stuck_job_named_by_getstatus_alone_is_still_the_stuck_job() -> None:
    """A job found stuck by /status, then shown only by GetStatus (its first 8 characters):
    the next wait (the stop's wait again) and the stop's last look still take it for the
    stuck job, never for work that arrived (no wait out to the deadline on it)."""
    worker = {"worker_id": 0, "current_job": "job-stuck-7", "busy_secs": 400.0}
    by_status = (status([pipeline("job-stuck-7", "done", "gpu", "pending")], [worker]),
                 GRPC_IDLE, True)
    by_grpc = (status(), host_work.bench_status(bench_proving("job-stuck-7")), True)
    settings = {"work.deadline": 600, "work.stuck_after": 20, "work.at_deadline": "skip"}
    ctx, _, _ = waiting([by_status] * 1000, **settings)
    clock = Clock()
    first = wait_for_work(ctx, work_how(ctx.target, "http://x/status"), clock, clock.sleep)
    assert first.verdict == "go" and [s.job.id for s in first.stuck] == ["job-stuck-7"]
    ctx, _, _ = waiting([by_grpc] * 1000, **settings)
    clock = Clock()
    again = wait_for_work(ctx, work_how(ctx.target, "http://x/status"), clock, clock.sleep,
                          stuck_before=first.stuck)
    assert again.verdict == "go" and clock.now < 5, again.describe()
    assert not again.waited_on and not again.new
    assert host_work.arrived(host_work.looked(*by_grpc), ["job-stuck-7"]) == ""
