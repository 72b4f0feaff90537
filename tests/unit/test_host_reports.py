"""host/reports.py: a host action's report is hostile data; wrong types are "unknown", None
or empty, never a crash."""

from __future__ import annotations

from typing import Any

import pytest

from rollout.host.reports import (
    BudgetWait,
    CommandReport,
    FilesReport,
    InputReport,
    Job,
    Partitions,
    PointedReport,
    ProbeReport,
    ProveReport,
    Report,
    SurveyReport,
    TextReport,
    WorkReport,
)

HOSTILE: list[Any] = [
    None, "$(reboot)", [1, 2], 7, True,
    {"outcome": ["stopped"], "reason": {"x": 1}, "pid": "42", "starttime": True,
     "escalated": "yes", "respawned": ["1", 2, None, False], "pidline": 5, "answer": None,
     "owners": "all", "exit": "0", "elapsed": "fast", "recorded": "true",
     "status_after": [], "previous": 3},
]


@pytest.mark.parametrize("doc", HOSTILE)
def test_hostile_reports_parse_to_unknown_not_a_crash(doc: Any) -> None:
    command = CommandReport.parse(doc)
    assert command.outcome == "unknown" and command.exit is None and command.output == ""
    proof = ProveReport.parse(doc)
    assert proof.exit == 1 and proof.elapsed == 0.0 and proof.recorded is False
    assert proof.status_after is None and proof.budget_wait is None
    assert Report.parse(doc).outcome == "unknown"
    survey = SurveyReport.parse(doc)
    assert (survey.links, survey.present, survey.same_device) == ((), False, False)


def test_a_good_report_keeps_its_figures_and_its_raw_data() -> None:
    doc = {"outcome": "failed", "reason": "cordon exited 3", "exit": 3, "output": "x" * 3000}
    command = CommandReport.parse(doc)
    assert (command.outcome, command.exit, command.output) == ("failed", 3, "x" * 2000)
    assert command.raw == doc
    proof = ProveReport.parse({"exit": 124, "elapsed": 3, "stdout": "x", "recorded": True,
                               "status_after": {"counters": {}}})
    assert (proof.exit, proof.elapsed, proof.recorded) == (124, 3.0, True)
    assert proof.status_after == {"counters": {}}


@pytest.mark.parametrize("doc", HOSTILE)
def test_hostile_reads_and_probes_parse_to_nothing(doc: Any) -> None:
    pointed = PointedReport.parse(doc)
    assert pointed.outcome == "unknown" and pointed.current is None and pointed.previous is None
    assert TextReport.parse(doc).text == ""
    probe = ProbeReport.parse(doc)
    assert probe.input.outcome == "unknown" and probe.input.sha256 is None
    assert probe.status is None and probe.owners is None


def test_a_probe_keeps_only_a_digest_and_a_status_object() -> None:
    probe = ProbeReport.parse({"input": {"outcome": "present", "size": 3, "sha256": "AB" * 32},
                               "status": '{"uptime_secs": 2}', "owners": {"ports": {}}})
    assert (probe.input.size, probe.input.sha256) == (3, "ab" * 32)
    assert probe.status == {"uptime_secs": 2} and probe.owners == {"ports": {}}
    for hostile in ("$(reboot)", "ab" * 33, "zz" * 32):
        assert InputReport.parse({"sha256": hostile}).sha256 is None
    for status in ("[1]", "not json", '"x"'):
        assert ProbeReport.parse({"status": status}).status is None


def test_files_keep_only_identities_and_digests_of_their_form() -> None:
    files = FilesReport.parse({"outcome": "read", "identities": {
        "a": "1:2:3", "b": "", "c": "i" * 201, "d": None, "e": 7},
        "sums": {"a": "AB" * 32, "b": "zz" * 32, "c": None}, "manifest": "{}"})
    assert (files.identities, files.sums) == ({"a": "1:2:3"}, {"a": "ab" * 32})
    many = FilesReport.parse({"identities": {f"f{i}": "x" for i in range(100)}})
    assert len(many.identities) == 64


JOB = {"kind": "porep-c2", "id": "j-1", "age": 42.5, "active": 1, "done": 2, "total": 10}


def test_one_job_type_for_the_work_in_flight_and_the_budget_wait() -> None:
    """ops.work's jobs and the budget wait's name a job with the same keys; only the budget
    wait's are counted (their partitions), and each says so in its text and data."""
    work = WorkReport.parse({"outcome": "busy", "jobs": [JOB]})
    wait = BudgetWait.parse({"job": JOB, "others": [JOB], "total": 100, "used": 90,
                             "available": 10, "pinned": 70, "partition": 14,
                             "waited": 1.5, "limit": 1})
    assert wait is not None and work.jobs == (Job("porep-c2", "j-1", 42.5),)
    assert wait.job == Job("porep-c2", "j-1", 42.5, Partitions(1, 2, 10)) == wait.others[0]
    assert work.jobs[0].describe() == "porep-c2 j-1 (42s)"
    assert wait.job.describe() == "porep-c2 j-1 (running 42.5 s, 2/10 partitions done, 1 in flight)"
    assert work.jobs[0].data() == {"kind": "porep-c2", "id": "j-1", "age": 42.5}
    assert wait.job.data() == JOB


@pytest.mark.parametrize("hostile", [
    {"kind": "\x1b]0;x\x07" + "k" * 100, "id": "$(reboot)\n" + "i" * 200, "age": 1e12},
    {"kind": ["porep"], "id": 7, "age": float("nan"), "active": True, "done": -1,
     "total": 2**61},
    {"kind": "", "id": "", "age": -5, "active": "1", "done": 1.0, "total": None},
])
def test_a_hostile_job_is_printable_bounded_data(hostile: dict[str, Any]) -> None:
    work = WorkReport.parse({"outcome": "busy", "jobs": [hostile, None, "j", 3] * 40})
    assert len(work.jobs) == 13  # the first 50 entries, those that are objects
    wait = BudgetWait.parse({"job": hostile, "others": [hostile] * 40, "total": 1, "used": 1,
                             "available": 0, "pinned": 0, "partition": 1, "waited": 0,
                             "limit": 0})
    assert wait is not None and len(wait.others) == 32
    for job in (work.jobs[0], wait.job):
        assert job.age is None and 0 < len(job.kind) <= 40 and 0 < len(job.id) <= 80
        assert job.describe().isprintable()
    assert work.jobs[0].partitions is None
    assert wait.job.partitions == Partitions(0, 0, 0)
