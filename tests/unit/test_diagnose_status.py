"""Status rows and fleet capacity from fixture facts (rollout.commands.status)."""

from __future__ import annotations

from typing import Any

from rollout.commands import status as health
from rollout.commands.diagnose import HostEvidence
from rollout.host.facts import HostFacts


def facts(state: str = "running", supervisor: str = "running", held: bool = False,
          last_exit: dict[str, Any] | None = None) -> dict[str, Any]:
    return {"daemon": {"state": state, "pid": 7, "uptime_secs": 3725.0},
            "supervisor": {"state": supervisor}, "held": held, "current_release": "abc123",
            "restarts_last_hour": 2, "exit_counts_complete": True, "last_exit": last_exit,
            "cgroup": {"memory": {"usage": 256 << 20, "limit": 512 << 20}}}


def row(f: dict[str, Any], reachable: bool = True) -> dict[str, Any]:
    ev = HostEvidence("h", reachable, HostFacts.parse(f), {"release": {"version": "v7"}},
                      error=None if reachable else "connection refused")
    return health.host_row(ev)


def test_states() -> None:
    def state(*args: Any, **kwargs: Any) -> str:
        return health.daemon_state(HostFacts.parse(facts(*args, **kwargs)))

    assert state() == "running"
    assert state("zombie") == "zombie"
    assert state("gone") == "stopped"
    assert state("none", held=True) == "held"
    assert state("gone", "crash-looping") == "crash-looping"


def test_a_row_carries_release_version_uptime_memory_and_the_last_exit_cause() -> None:
    r = row(facts(last_exit={"time": 1.0, "signal": "SIGKILL", "held": False,
                             "oom": {"oom_kill": 0}}))
    assert r["serving"] and r["version"] == "v7" and r["release"] == "abc123"
    assert r["last_exit_cause"] == "external-sigkill"
    cells = health.table_row(r, now=61.0)
    assert cells["uptime"] == "1h02m" and cells["last_exit"] == "SIGKILL 1m00s ago"
    assert cells["memory"] == "256.0MiB / 512.0MiB"


def test_unreachable_row() -> None:
    r = row({}, reachable=False)
    assert r == {"host": "h", "state": "unreachable", "serving": False,
                 "error": "connection refused"}
    assert health.table_row(r, 0.0)["state"] == "unreachable"


def test_capacity_check(capsys: Any) -> None:
    rows = [row(facts()), row(facts("gone")), row({}, reachable=False)]
    assert health.capacity(rows).serving == 1
    assert health.check_capacity(rows, 0.8) == 1
    assert "1/3" in capsys.readouterr().err
    assert health.check_capacity(rows, 0.3) == 0
    assert health.check_capacity(rows, 0.0) == 0


def test_watch_refreshes_until_told_to_stop() -> None:
    calls: list[float] = []
    codes = iter([0, 1, 0])
    code = health.watch(lambda: next(codes), 2.5, sleep=calls.append, rounds=3)
    assert code == 0 and calls == [2.5, 2.5]


def test_the_diagnose_script_runs_through_the_hosts_agent() -> None:
    """status and diagnose run their host script as run_python does (a fork of the host's
    agent where it has one), never as a shell's `python3 -` that starts a second
    interpreter on the host (issue 30: one interpreter per host per command)."""
    from rollout.commands import diagnose
    from rollout.transport.base import RunResult

    class Ctx:
        ran: list[tuple[str, tuple[object, ...]]] = []

        def run_python(self, source: str, *args: object, timeout: float | None = None
                       ) -> RunResult:
            self.ran.append((source, args))
            return RunResult("python3 -", 0, 'noise\n{"exits": []}\n', "")

        def sh(self, *args: Any, **kwargs: Any) -> RunResult:
            raise AssertionError("diagnose ran through a shell")

    ctx = Ctx()
    data, size = diagnose._json_script(ctx, "SCRIPT", ("--root", "/data"), 30)  # type: ignore[arg-type]
    assert data == {"exits": []} and size > 0
    assert ctx.ran == [("SCRIPT", ("--root", "/data"))]
