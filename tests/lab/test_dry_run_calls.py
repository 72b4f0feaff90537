"""The dry run lists every call each host would receive, and the run that follows it makes
exactly those calls (issue 26): `--dry-run --json` against the run's host_call events.
Preflight included: its reads, and the staging of the proof parameters (pushed from
params.source) and the validation input, worked out from the facts gathered for the plan."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from rollout.config.playbook import LAB_PLAYBOOK

from .conftest import LabFleet
from .rollout_helpers import FAST_KNOBS, CliRun, fresh_fleet, rollout_args, run_cli

pytestmark = pytest.mark.lab


def _args(fleet: LabFleet, *extra: str) -> tuple[str, ...]:
    names = ":".join(h.name for h in fleet.hosts[:2])
    return (*rollout_args(fleet.fleet_path, "v1"), "--set", f"lab_knobs={FAST_KNOBS}",
            "--set", 'serial=["100%"]', "--limit", names, *extra)  # one batch: nothing staged


def _comparable(call: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    """A call without the kwargs only the run fills in (those its `runtime` names)."""
    runtime = set(call.get("runtime") or [])
    return call["call"], {k: v for k, v in call["kwargs"].items() if k not in runtime}


def _polls_once(calls: list[tuple[str, dict[str, Any]]]) -> list[tuple[str, dict[str, Any]]]:
    """A poll (ops.work until the host is idle) is listed once: its repeats are one call."""
    return [c for i, c in enumerate(calls) if i == 0 or c != calls[i - 1]]


def planned(run: CliRun, host: str) -> dict[str, list[tuple[str, dict[str, Any]]]]:
    return {e["step"]: [_comparable(c) for c in e["data"]["calls"]] for e in run.events
            if e["kind"] == "planned_step" and e["host"] == host and e["status"] == "run"}


def made(run: CliRun, host: str) -> dict[str, list[tuple[str, dict[str, Any]]]]:
    """Each step's host calls, in order: the host_call events between its step_start and
    step_end (staging and the lock's calls fall outside any step)."""
    calls: dict[str, list[tuple[str, dict[str, Any]]]] = {}
    step = None
    for e in (e for e in run.events if e.get("host") == host):
        if e["kind"] == "step_start":
            step = e["step"]
            calls[step] = []
        elif e["kind"] == "step_end":
            step = None
        elif e["kind"] == "host_call" and step is not None:
            calls[step].append(_comparable(e["data"]))
    return {step: _polls_once(c) for step, c in calls.items()}


def test_the_run_makes_the_calls_its_dry_run_listed(lab_fleet: LabFleet, tmp_path: Path) -> None:
    fleet = fresh_fleet(lab_fleet)
    built = run_cli(tmp_path, "build", "-p", str(LAB_PLAYBOOK), "--set", "version=v1",
                    "--out", str(tmp_path / "bundle"))  # the image exists: the plan names
    assert built.code == 0, built.stderr[-3000:]  # its release (else a build to come)
    plan = run_cli(tmp_path, *_args(fleet, "--dry-run"))
    assert plan.code == 0, plan.stderr[-3000:]
    run = run_cli(tmp_path, *_args(fleet))
    assert run.code == 0, run.stderr[-3000:]
    wrong = []
    for host in (h.name for h in fleet.hosts[:2]):
        listed, done = planned(plan, host), made(run, host)
        assert listed, plan.events
        wrong += [(host, step, calls, done.get(step)) for step, calls in listed.items()
                  if done.get(step) != calls]
    assert wrong == [], "\n".join(f"{h} {s}:\n  listed {c}\n  made   {d}" for h, s, c, d in wrong)
    again = run_cli(tmp_path, *_args(fleet, "--dry-run"))
    assert again.code == 0, again.stderr[-3000:]
    steps = [e for e in again.events if e["kind"] == "planned_step"]
    assert steps and all(e["status"] == "skip" and e["data"]["calls"] == [] for e in steps), [
        (e["host"], e["step"], e["status"], e["reason"]) for e in steps if e["status"] != "skip"]
