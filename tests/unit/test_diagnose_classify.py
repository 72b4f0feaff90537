"""Cause classification from fixture evidence: facts and diagnose output in, verdict out."""

from __future__ import annotations

from typing import Any

import pytest

from rollout.commands import diagnose as d
from rollout.host.facts import HostFacts

T0 = 1_800_000_000.0
START = "=== rollout supervisor: starting release r1: /data/current/cuzk-daemon -c x"


def exit_rec(**kw: Any) -> dict[str, Any]:
    rec: dict[str, Any] = {"time": T0, "pid": 42, "release": "r1", "uptime_secs": 12.5,
                           "exit_code": None, "signal": None, "held": False,
                           "memory": {"usage": 480 << 20, "limit": 512 << 20},
                           "oom": {"oom": 0, "oom_kill": 0}}
    rec.update(kw)
    return rec


def diag(exits: list[dict[str, Any]], matches: tuple[tuple[str, int], ...] | list[Any] = (),
         starts: tuple[float, ...] | list[float] = (),
         kernel: dict[str, Any] | None = None) -> dict[str, Any]:
    return {
        "exits": exits,
        "starts": [{"time": t} for t in starts],
        "log": {"exists": True, "files": [], "tail": [],
                "matches": [{"line": line, "run": run, "next": None} for line, run in matches]},
        "kernel": kernel or {"readable": False, "error": "/dev/kmsg: Permission denied",
                             "lines": []},
    }


PREV = exit_rec(time=T0 - 100, signal="SIGTERM", held=True)

CASES: dict[str, tuple[dict[str, Any], str, list[str]]] = {
    "silent SIGKILL, counters unchanged": (
        diag([PREV, exit_rec(signal="SIGKILL")]),
        d.EXTERNAL_SIGKILL, ["signal SIGKILL", "oom_kill unchanged (0)", "no panic"]),
    "SIGKILL with the cgroup oom_kill counter up": (
        diag([PREV, exit_rec(signal="SIGKILL", oom={"oom": 1, "oom_kill": 1})]),
        d.OOM_KILL, ["oom_kill rose 0 -> 1", "memory at exit 480.0MiB of 512.0MiB (94%"]),
    "no exit status recorded, but the oom_kill counter rose": (
        diag([PREV, exit_rec(oom={"oom_kill": 1})]), d.OOM_KILL, ["no exit status recorded"]),
    "SIGKILL with a kernel OOM line for the daemon": (
        diag([PREV, exit_rec(signal="SIGKILL")], kernel={"readable": True, "lines": [
            {"time": T0 - 0.2, "line": "Memory cgroup out of memory: Killed process 9042 "
                                       "(cuzk-daemon) total-vm:797628kB"}]}),
        d.OOM_KILL, ["kernel: Memory cgroup out of memory: Killed process 9042"]),
    "a kernel OOM line long before the exit is not evidence": (
        diag([PREV, exit_rec(signal="SIGKILL")], kernel={"readable": True, "lines": [
            {"time": T0 - 3600, "line": "Out of memory: Killed process 7 (cuzk-daemon)"}]}),
        d.EXTERNAL_SIGKILL, ["no OOM kill in kernel messages near"]),
    "panic line in the run that died": (
        diag([PREV, exit_rec(exit_code=101)],
             [("thread 'main' panicked at src/main.rs:88:14:", 0)]),
        d.PANIC, ["exit code 101", "daemon.log: thread 'main' panicked at"]),
    "panic in an older run, restarted since: the death run is the one before": (
        diag([PREV, exit_rec(exit_code=101)],
             [("thread 'main' panicked at src/main.rs:1:1:", 1)], starts=[T0 + 1]),
        d.PANIC, ["panicked at src/main.rs:1:1"]),
    "exit code 101 without the panic line": (
        diag([PREV, exit_rec(exit_code=101)]), d.PANIC, ["Rust panic"]),
    "CUDA error then SIGABRT": (
        diag([PREV, exit_rec(signal="SIGABRT")],
             [("ERROR gpu: CUDA_ERROR_ILLEGAL_ADDRESS in kernel msm", 0)]),
        d.GPU_FAULT, ["CUDA_ERROR_ILLEGAL_ADDRESS"]),
    "Xid in the kernel log near the exit": (
        diag([PREV, exit_rec(signal="SIGSEGV")], kernel={"readable": True, "lines": [
            {"time": T0 - 1, "line": "NVRM: Xid (PCI:0000:01:00): 79, GPU has fallen off"}]}),
        d.GPU_FAULT, ["kernel: NVRM: Xid"]),
    "clean exit": (
        diag([PREV, exit_rec(exit_code=0)]), d.CLEAN_EXIT, ["exit code 0", "no hold file"]),
    "stopped by rollout (held), even by SIGKILL after the grace": (
        diag([PREV, exit_rec(signal="SIGKILL", held=True)]),
        d.STOPPED_BY_TOOL, ["held=True", "hold file present"]),
    "segfault with no panic or CUDA line": (
        diag([PREV, exit_rec(signal="SIGSEGV")]), d.CRASH, ["signal SIGSEGV"]),
    "SIGTERM from someone else": (
        diag([PREV, exit_rec(signal="SIGTERM")]), d.UNKNOWN, ["signal SIGTERM"]),
}


@pytest.mark.parametrize("name", list(CASES))
def test_classify(name: str) -> None:
    evidence, cause, must_contain = CASES[name]
    verdict = d.classify(HostFacts(), evidence)
    assert verdict.cause == cause, verdict
    text = "\n".join(verdict.evidence)
    for needle in must_contain:
        assert needle in text, (needle, verdict)


def test_no_exit_record_is_unknown_and_says_what_is_missing() -> None:
    verdict = d.classify(HostFacts(last_exit=None), diag([]))
    assert verdict.cause == d.UNKNOWN
    assert "exits.jsonl" in verdict.missing[0]


def test_facts_alone_suffice_for_a_first_exit() -> None:
    verdict = d.classify(HostFacts(last_exit=exit_rec(signal="SIGKILL", oom={"oom_kill": 2})), {})
    assert verdict.cause == d.OOM_KILL
    assert "no earlier exit to compare" in verdict.evidence[1]


def test_an_unreachable_host_is_reported_as_such() -> None:
    report = d.report_dict(d.HostEvidence("lab-9", False, error="connection refused"))
    assert report["reachable"] is False
    assert report["verdict"]["summary"] == "host unreachable"
    assert "connection refused" in d.render_text(report)


def test_every_cause_is_listed() -> None:
    assert {c for _, c, _ in CASES.values()} | {d.UNKNOWN} <= set(d.CAUSES)
