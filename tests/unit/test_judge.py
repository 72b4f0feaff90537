"""The one judge (host/scripts/judge.py): each rollback kind's verdict from the reports ops
gives (real host actions on a temporary root where they can run here, else recorded
reports), in the controller's words; hostile reports never crash it."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from rollout.host.scripts import judge, ops

PASSED = "=== Proof Result ===\nstatus:    COMPLETED\n"
PATTERN = r"^status:\s+COMPLETED"


def one(kind: str, kwargs: dict[str, Any], report: Any) -> tuple[str, str, dict[str, Any]]:
    return judge.verdict(kind, [{"call": kind, "kwargs": kwargs}], [report])


@pytest.fixture
def root(tmp_path: Path) -> Path:
    (tmp_path / "releases" / "r1").mkdir(parents=True)
    (tmp_path / "rollout").mkdir()
    return tmp_path


def test_stop(root: Path) -> None:
    kw = {"root": str(root), "signal": "SIGTERM", "grace": 1.0}
    status, reason, _ = one("stop", kw, ops.stop(**kw))  # type: ignore[arg-type]
    assert (status, reason) == ("skipped", "hold set; no daemon pidfile, nothing to stop")
    stopped = {"outcome": "stopped", "pid": 7, "starttime": 9, "signal": "SIGTERM",
               "escalated": True}
    assert one("stop", kw, stopped)[:2] == (
        "changed", "hold set; daemon 7 stopped (SIGTERM, escalated to SIGKILL)")
    assert one("stop", kw, {"outcome": "still-running", "pid": 7}) == (
        "failed", "daemon 7 survived SIGTERM and SIGKILL", {"outcome": "still-running",
                                                           "pid": 7})
    assert one("stop", kw, {"outcome": "already-dead", "pid": 7, "state": "zombie"})[:2] == (
        "skipped", "hold set; daemon 7 already zombie")
    assert one("stop", kw, {"outcome": "kept", "reason": "daemon 7 runs release r1: kept"}
               )[:2] == ("skipped", "daemon 7 runs release r1: kept")


def test_adopted_daemons() -> None:
    calls = [{"call": "stop", "kwargs": {"adopt_pid": p, "signal": "SIGTERM"}} for p in (5, 6)]
    done = [{"outcome": "stopped", "pid": 5, "cmdline": "cuzk"},
            {"outcome": "already-dead", "pid": 6}]
    status, reason, data = judge.verdict("stop", calls, done)
    assert status == "changed"
    assert reason == "hold set; adopted and stopped daemon(s) 5 (cuzk), 6 (?)"
    assert data == {"adopted": done}
    respawned = {"outcome": "respawned", "pid": 5, "parent": 1, "respawned": [8]}
    status, reason, _ = judge.verdict("stop", calls[:1], [respawned])
    assert status == "failed" and "respawned by its parent pid 1" in reason
    assert "docs/adopt.md" in reason


def test_the_drain_waits_for_the_daemon_the_stop_stopped() -> None:
    assert judge.stopped_daemon({"outcome": "stopped", "pid": 7, "starttime": 9}) == (7, 9)
    assert judge.stopped_daemon({"outcome": "already-dead", "pid": 7}) == (7, None)
    for hostile in (None, [], {"outcome": "kept", "pid": 7}, {"outcome": "stopped"},
                    {"outcome": "stopped", "pid": "7"}, {"outcome": "stopped", "pid": True},
                    {"outcome": "stopped", "pid": -3, "starttime": 1}):
        assert judge.stopped_daemon(hostile) == (0, None), hostile
    kwargs = judge.drain_kwargs({"root": "/data"}, {"outcome": "stopped", "pid": 7,
                                                    "starttime": "x"})
    assert kwargs == {"root": "/data", "pid": 7, "starttime": None}


def test_drain(root: Path) -> None:
    drained = {"outcome": "drained", "pid": 7, "started": 1.0, "ended": 3.5, "drained_by": "budget",
               "budget": 1024, "working_set": 2048, "page_cache": 0, "reason": "r"}
    status, reason, data = one("drain", {}, drained)
    assert status == "ok" and reason == (
        "old daemon gone and headroom fits the budget 1.0KiB after 2.5s (working set "
        "2.0KiB, page cache 0B)")
    assert "reason" not in data and data["budget"] == 1024
    assert one("drain", {}, {**drained, "pid": 0})[1].startswith("no daemon stopped here; ")
    status, reason, _ = one("drain", {}, {"outcome": "plateau", "plateau": 0.5})
    assert status == "failed" and reason.startswith("memory stopped falling for 0.5s")
    assert one("drain", {}, {"outcome": "kept", "reason": "daemon 3 runs release r1"})[0] == \
        "skipped"


def test_switch(root: Path) -> None:
    (root / "cuzk.toml").write_text("new\n")
    (root / "cuzk.toml.for-r1").write_text("old\n")
    point = {"root": str(root), "release": "r1"}
    restore = {"config_path": str(root / "cuzk.toml"),
               "kept_config": str(root / "cuzk.toml.for-r1")}
    calls = [{"call": "point_current", "kwargs": point},
             {"call": "restore_config", "kwargs": restore}]
    reports = [ops.point_current(**point), ops.restore_config(**restore)]
    status, reason, data = judge.verdict("switch", calls, reports)
    assert status == "changed" and reason == (
        "current: none -> r1; restored the config r1 ran with"), reason
    assert data == {"previous": None, "release": "r1"}
    again = [ops.point_current(**point), ops.restore_config(**restore)]
    assert judge.verdict("switch", calls, again)[:2] == (
        "skipped", "current already points at r1")
    missing = ops.point_current(str(root), "r2")
    assert one("switch", {"release": "r2"}, missing)[:2] == (
        "failed", "could not point current at r2: release r2 is not on the host")


def test_start(root: Path) -> None:
    kw = {"root": str(root), "wait": 1.0}
    assert one("start", kw, ops.start(**kw))[:2] == (  # type: ignore[arg-type]
        "failed", f"{root}/current does not point at a release")
    started = {"outcome": "started", "pidline": "42 7 /data/releases/r1/cuzk-daemon"}
    assert one("start", kw, started) == (
        "changed", "hold released; supervisor started daemon 42",
        {"pidfile": started["pidline"]})
    assert one("start", kw, {"outcome": "not-started"})[1] == (
        "supervisor did not start the daemon within 1s")
    assert one("start", kw, {"outcome": "running", "pidline": "  "})[0] == "failed"


def test_ready() -> None:
    kw = {"status_url": "http://127.0.0.1:9821/status", "seconds": 60.0}
    status = {"uptime_secs": 1.5, "memory": {"total_bytes": 1024},
              "counters": {"total_completed": 3, "total_failed": 0}}
    verdict = one("ready", kw, {"outcome": "ready", "answer": json.dumps(status)})
    assert verdict == ("ok", "status port answers (up 1.5s, budget 1.0KiB, 3 proofs "
                       "completed, 0 failed)", {"status": status})
    assert one("ready", kw, {"outcome": "ready", "answer": "<html>"})[1].startswith(
        "http://127.0.0.1:9821/status answered with something that is not JSON")
    assert one("ready", kw, {"outcome": "timeout"})[1] == (
        "status port http://127.0.0.1:9821/status did not answer within 60s")
    assert one("ready", kw, {"outcome": "died", "reason": "daemon 4 died during start-up"}
               )[1] == ("daemon 4 died during start-up; status port "
                        "http://127.0.0.1:9821/status never answered")


def test_validate(tmp_path: Path) -> None:
    kw = {"command": f"printf '{PASSED}'", "timeout": 30.0, "kill_after": 5.0,
          "pattern": PATTERN}
    assert one("validate", kw, ops.prove(**kw))[:2] == (  # type: ignore[arg-type]
        "ok", "validation proof COMPLETED")
    failed = {**kw, "command": "printf '=== Proof Result ===\\nstatus:    FAILED\\n'"}
    assert one("validate", failed, ops.prove(**failed))[1] == (  # type: ignore[arg-type]
        "validation failed: status FAILED (exit 0)")
    hung = {"outcome": "ran", "exit": 124, "elapsed": 30.0, "stdout": PASSED}
    assert one("validate", kw, hung)[:2] == (
        "failed", "validation hung (no result in 30 s): killed")
    lying = {"outcome": "ran", "exit": 0, "passed": True, "stdout": "status: COMPLETED"}
    assert one("validate", kw, lying)[0] == "failed"  # the block decides, not the host's word


HOSTILE: list[Any] = [
    None, [], "stopped", 7, {}, {"outcome": 5}, {"outcome": None, "reason": ["x"]},
    {"outcome": "stopped", "pid": "x", "signal": [], "escalated": "yes"},
    {"outcome": "drained", "ended": "x", "started": {}, "budget": "y", "zombie_note": 3},
    {"outcome": "pointed", "previous": 5}, {"outcome": "restored"},
    {"outcome": "started", "pidline": 42}, {"outcome": "ready", "answer": 7},
    {"outcome": "ready", "answer": "[1]"}, {"outcome": "ran", "stdout": None, "exit": "0"},
]


@pytest.mark.parametrize("kind", sorted(judge.JUDGES))
@pytest.mark.parametrize("report", HOSTILE, ids=lambda r: json.dumps(r)[:40])
def test_hostile_reports_are_a_verdict_never_a_crash(kind: str, report: Any) -> None:
    for calls in ([{"call": kind, "kwargs": {"timeout": "x", "wait": None,
                                             "status_url": 3, "pattern": ["x"]}}],
                  [None], ["x"], []):
        status, reason, data = judge.verdict(kind, calls, [report, report])
        assert status in ("changed", "ok", "skipped", "failed") and isinstance(reason, str)
        assert isinstance(data, dict)
        if not isinstance(report, dict) or not report:
            assert status in ("failed", "skipped"), (kind, report, reason)
    assert judge.verdict(kind, [], [])[0] == "failed"
    assert judge.verdict("unknown", [], [{}])[0] == "failed"
