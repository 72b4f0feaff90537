"""The host's guard: its decision (pure), the controller's summary of what it did, and the
script run for real against a temp root with the real supervisor and a stand-in daemon."""

from __future__ import annotations

import json
import shlex
import shutil
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from test_hostside_supervisor import FAKE_DAEMON, Host, alive, read_pidfile, wait_for

from rollout.engine.guard import BOOTSTRAP, arm_input, summarize
from rollout.host.scripts import guard, script_text
from rollout.transport.local import LocalTransport

OLD, NEW = "old0000release", "new1111release"


@pytest.mark.parametrize(
    ("phase", "previous", "steps"),
    [
        ("untouched", OLD, ["stop", "switch", "start", "ready", "validate"]),
        ("stopped", OLD, ["stop", "switch", "start", "ready", "validate"]),
        ("switched", OLD, ["stop", "switch", "start", "ready", "validate"]),
        ("started", OLD, ["stop", "switch", "start", "ready", "validate"]),
        ("validated", OLD, []),
        ("stopped", None, ["start", "ready", "validate"]),
        ("started", NEW, ["start", "ready", "validate"]),  # the previous is the new one
        ("validated", None, []),
    ],
)
def test_decide_from_the_phase_the_controller_reported(
    phase: str, previous: str | None, steps: list[str]
) -> None:
    summary, got = guard.decide({"release": NEW, "previous": previous}, {"phase": phase})
    assert got == steps, summary
    if not steps:
        assert "nothing to do" in summary


def test_settled_host_is_left_alone_whatever_the_phase() -> None:
    assert guard.decide({"release": NEW, "previous": OLD},
                        {"phase": "started", "settled": True})[1] == []


def test_run_ids_are_data_not_paths() -> None:
    for bad in ("../x", "a/b", "", "-x"):
        with pytest.raises(ValueError):
            guard.run_dir("/data", bad)


def test_summary_says_what_the_guard_did() -> None:
    events = [
        {"kind": "guard_takeover", "data": {"guard": "7", "phase": "stopped"}},
        {"kind": "guard_end", "status": "validated", "reason": f"roll back to {OLD}",
         "data": {"guard": "7", "release": OLD, "rolled_back": True, "acted": True}},
    ]
    report = {"guards": [{"guard": "7", "phase": "stopped", "ended": "validated"},
                         {"guard": "9", "phase": "validated", "settled": True}],
              "events": events}
    [only] = summarize(report)
    assert only["status"] == "validated"
    assert only["reason"] == ("controller lost in phase stopped; the host's guard rolled back "
                              f"to {OLD}, validated")
    pending = summarize({"guards": [{"guard": "3", "phase": "started"}], "events": []})
    assert pending[0]["status"] == "pending"


class TwoReleases(Host):
    """A temp host serving NEW from the real supervisor, OLD beside it with its config."""

    def __init__(self, tmp: Path) -> None:
        super().__init__(tmp)
        for rid in (OLD, NEW):
            where = self.root / "releases" / rid
            where.mkdir()
            (where / "cuzk-daemon").write_text(
                FAKE_DAEMON.format(python=sys.executable, root=str(self.root)))
            (where / "cuzk-daemon").chmod(0o755)
        (self.root / "current").unlink()
        (self.root / "current").symlink_to(f"releases/{NEW}")
        self.config = self.root / "cuzk.toml"
        self.config.write_text("new config\n")
        (self.root / f"cuzk.toml.for-{OLD}").write_text("old config\n")
        shutil.copy(self.script, self.path("supervisor.py"))
        self.script = self.path("supervisor.py")

    def recipe(self, run_id: str, previous: str | None) -> dict[str, Any]:
        return {"run_id": run_id, "host": "tmp", "root": str(self.root), "release": NEW,
                "previous": previous, "config_path": str(self.config),
                "kept_config": str(self.root / f"cuzk.toml.for-{OLD}") if previous else None,
                "status_url": None, "grpc_port": None, "status_port": None,
                "stop_signal": "SIGTERM", "stop_grace": 5.0, "start_wait": 60.0,
                "ready_timeout": 60.0, "validate_timeout": 60.0,
                "validate_command": "echo 'status:    COMPLETED' $(readlink current)",
                "success_pattern": r"^status:\s+COMPLETED"}

    def events(self, run_id: str) -> list[dict[str, Any]]:
        path = self.root / "rollout" / "runs" / run_id / "guard.jsonl"
        text = path.read_text() if path.exists() else ""
        return [json.loads(line) for line in text.splitlines()]


@pytest.fixture
def host(tmp_path: Path) -> Iterator[TwoReleases]:
    h = TwoReleases(tmp_path)
    try:
        yield h
    finally:
        h.cleanup()


def arm(host: TwoReleases, recipe: dict[str, Any]) -> Any:
    command = f"cd {shlex.quote(str(host.root))} && python3 -c {shlex.quote(BOOTSTRAP)} --arm"
    stream = LocalTransport().open_stream(command, arm_input(recipe))
    answer = json.loads(stream.readline(60))
    assert answer["armed"] is True, answer
    return stream


def test_lost_tether_in_phase_started_rolls_back_and_validates(host: TwoReleases) -> None:
    host.start()
    new = host.daemon()
    assert f"/releases/{NEW}/" in new[2]
    stream = arm(host, host.recipe("run-a", OLD))
    stream.write("phase stopped\nphase switched\nphase started\n")
    stream.close()  # the controller is gone: no "settled"
    end = wait_for(lambda: next((e for e in host.events("run-a") if e["kind"] == "guard_end"),
                                None))
    assert end["status"] == "validated" and end["data"]["rolled_back"] is True, end
    assert end["data"]["phase"] == "started"
    assert (host.root / "current").readlink() == Path(f"releases/{OLD}")
    assert host.config.read_text() == "old config\n"
    assert not host.path("hold").exists()
    pid, _, exe = read_pidfile(host.root) or (0, 0, "")
    assert f"/releases/{OLD}/" in exe and alive(pid) and not alive(new[0])
    steps = {e["step"]: e for e in host.events("run-a") if e["kind"] == "step_end"}
    assert [steps[f"guard-{k}"]["status"] for k in ("stop", "switch", "start", "ready",
                                                       "validate")] == [
        "changed", "changed", "changed", "ok", "ok"]
    assert all(e["run_id"] == "run-a" and e["host"] == "tmp" for e in host.events("run-a"))
    report = guard.report(str(host.root), "run-a", 5)
    assert summarize(report)[0]["reason"].endswith(f"rolled back to {OLD}, validated")


def test_settled_tether_leaves_the_host_as_the_controller_left_it(host: TwoReleases) -> None:
    host.start()
    new = host.daemon()
    stream = arm(host, host.recipe("run-b", OLD))
    stream.write("phase stopped\nphase started\nphase validated\nsettled\n")
    stream.close()
    runs = host.root / "rollout" / "runs" / "run-b"
    report = guard.report(str(host.root), "run-b", 30)
    assert report["pending"] == 0 and report["guards"][0]["settled"] is True, report
    assert host.events("run-b") == [] and summarize(report) == []
    assert (host.root / "current").readlink() == Path(f"releases/{NEW}")
    assert alive(new[0]) and (runs / f"tether.{report['guards'][0]['guard']}").exists()


def test_no_previous_release_keeps_and_validates_the_new_one(host: TwoReleases) -> None:
    host.path("hold").write_text("")  # stopped and held, as the stop step leaves it
    host.start()
    stream = arm(host, host.recipe("run-c", None))
    stream.write("phase stopped\n")
    stream.close()
    end = wait_for(lambda: next((e for e in host.events("run-c") if e["kind"] == "guard_end"),
                                None))
    assert end["status"] == "validated" and end["data"]["release"] == NEW, end
    assert not host.path("hold").exists()
    assert f"/releases/{NEW}/" in host.daemon()[2]


def test_the_script_sent_is_the_inlined_one() -> None:
    text = script_text("guard")
    assert "inlined from rollout/host/scripts/common.py" in text
    assert arm_input({"a": 1}).startswith(f"{len(text.encode())}\n".encode())
