"""`rollout status --prom`: every state its own series with the right one at 1 (dead and
blocked too), last-exit labels taken from one and the same exit, a release info metric and
a restarts counter; the file passes `promtool check metrics` (Debian's prometheus package;
installed when missing)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from rollout.commands.diagnose import EXTERNAL_SIGKILL, STOPPED_BY_TOOL, HostEvidence
from rollout.commands.status import host_row, table_row
from rollout.errors import EnvironmentProblem
from rollout.host.facts import HostFacts
from rollout.lab.apt import ensure_command
from rollout.reports import prom

RELEASE = "0123456789ab"
HELD_SIGTERM = {"time": 900.0, "signal": "SIGTERM", "exit_code": None, "held": True}


def _host(name: str, facts: dict[str, Any], diag: dict[str, Any] | None = None) -> HostEvidence:
    return HostEvidence(name, True, HostFacts.parse({"current_release": RELEASE, **facts}),
                        diag or {})


def _fleet() -> list[dict[str, Any]]:
    running = _host("run", {"supervisor": {"pid": 10, "alive": True, "state": "running"},
                            "daemon": {"state": "running", "pid": 20, "uptime_secs": 50.0},
                            "restarts_total": 7, "restarts_last_hour": 1,
                            "last_exit": {"time": 950.0, "signal": "SIGKILL", "held": False}},
                    {"release": {"version": 'v2"\n'}})
    blocked = _host("blocked", {"supervisor": {"pid": 11, "alive": True, "state": "blocked",
                                               "status": {"reason": "port 9820 in use"}},
                                "daemon": {"state": "none"}, "last_exit": HELD_SIGTERM})
    # Killed with its supervisor (the provider's watchdog): no exit record after the last
    # start; the record on file is an older stop by rollout (SIGTERM, held).
    dead = _host("dead", {"supervisor": {"pid": 12, "alive": False, "state": "running"},
                          "daemon": {"state": "gone", "pid": 21, "note": "pid 21 gone"},
                          "last_start": {"time": 1000.0}, "last_exit": HELD_SIGTERM},
                 {"supervisor_state": {"state": "running", "updated": 1100.0, "oom": {}},
                  "starts": [{"time": 1000.0}], "exits": [HELD_SIGTERM]})
    gone = HostEvidence("gone", False, error="connection refused")
    return [host_row(ev) for ev in (running, blocked, dead, gone)]


def _families(text: str) -> dict[str, Any]:
    return {f.name: f for f in text_string_to_metric_families(text)}


def test_every_state_is_a_series_and_the_right_one_is_1() -> None:
    rows = _fleet()
    assert [r["state"] for r in rows] == ["running", "blocked", "dead", "unreachable"]
    samples = _families(prom.render(rows, 2000.0))["rollout_daemon_state"].samples
    for row in rows:
        mine = {s.labels["state"]: s.value for s in samples if s.labels["host"] == row["host"]}
        assert set(mine) == set(prom.STATES)
        assert [s for s, v in mine.items() if v == 1.0] == [row["state"]]


def test_last_exit_labels_describe_one_exit() -> None:
    rows = _fleet()
    family = _families(prom.render(rows, 2000.0))["rollout_daemon_last_exit_timestamp_seconds"]
    got = {s.labels["host"]: (s.labels["cause"], s.labels["how"], s.value)
           for s in family.samples}
    assert got == {
        "run": (EXTERNAL_SIGKILL, "SIGKILL", 950.0),
        "blocked": (STOPPED_BY_TOOL, "SIGTERM", 900.0),
        # never external-sigkill with the older stop's SIGTERM: the death has no record;
        # its time is the supervisor's last heartbeat before it
        "dead": (EXTERNAL_SIGKILL, "unrecorded", 1100.0),
    }
    dead = next(r for r in rows if r["host"] == "dead")
    assert table_row(dead, 1160.0)["last_exit"] == "unrecorded (last heartbeat 1m00s ago)"


def test_release_info_and_restarts_counter() -> None:
    families = _families(prom.render(_fleet(), 2000.0))
    info = families["rollout_release_info"]  # an info metric, as text format 0.0.4 has it
    assert {s.labels["host"]: (s.name, s.labels["release"], s.labels["version"], s.value)
            for s in info.samples}["run"] == ("rollout_release_info", RELEASE, 'v2"\n', 1.0)
    assert {s.labels["host"] for s in info.samples} == {"run", "blocked", "dead"}
    restarts = families["rollout_daemon_restarts"]
    assert restarts.type == "counter"
    assert [(s.name, s.labels["host"], s.value) for s in restarts.samples] == [
        ("rollout_daemon_restarts_total", "run", 7.0)]


@pytest.fixture(scope="module")
def promtool() -> str:
    """promtool, installed with Debian's prometheus package when missing (root); a skip
    that says why only when it cannot be installed here."""
    try:
        ensure_command("promtool", "prometheus")
    except EnvironmentProblem as e:
        pytest.skip(f"promtool cannot be installed here: {e}")
    return str(shutil.which("promtool"))


def test_promtool_accepts_the_file(promtool: str, tmp_path: Path) -> None:
    out = tmp_path / "rollout.prom"
    prom.write(out, _fleet(), 2000.0)
    check = subprocess.run([promtool, "check", "metrics"], input=out.read_text(),
                           capture_output=True, text=True, timeout=60)
    assert check.returncode == 0 and check.stdout + check.stderr == "", (
        check.stdout + check.stderr)
    bad = subprocess.run([promtool, "check", "metrics"], input="rollout_x{a=\"1\" 1\n",
                         capture_output=True, text=True, timeout=60)
    assert bad.returncode != 0  # the check can fail
