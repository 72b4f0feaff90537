"""A run keeps a connection open to each locked host: a fleet larger than the open-file
limit is given the room it needs (the soft limit raised, never past the hard one) or refused
before any host is touched, naming the figures and the fix. Each case runs in a child
process, whose limits it sets (a lowered hard limit cannot be raised again)."""

from __future__ import annotations

import json
import resource
import subprocess
import sys

import pytest

from rollout.engine.openfiles import files_needed

CHILD = """
import json, resource, sys
from rollout.errors import EnvironmentProblem
from rollout.engine.openfiles import ensure_open_files
hosts, workers = int(sys.argv[1]), int(sys.argv[2])
try:
    ensure_open_files(hosts, workers)
    said = None
except EnvironmentProblem as e:
    said = [str(e), e.exit_code]
print(json.dumps({"limits": resource.getrlimit(resource.RLIMIT_NOFILE), "said": said}))
"""


def run_child(soft: int, hard: int, hosts: int, workers: int = 64) -> dict[str, object]:
    def limit() -> None:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))

    out = subprocess.run([sys.executable, "-c", CHILD, str(hosts), str(workers)],
                         preexec_fn=limit, capture_output=True, text=True, timeout=60,
                         check=True)  # fmt: skip
    return json.loads(out.stdout)  # type: ignore[no-any-return]


def test_a_fleet_within_the_soft_limit_changes_nothing() -> None:
    assert run_child(1024, 4096, 100) == {"limits": [1024, 4096], "said": None}


def test_the_soft_limit_is_raised_to_what_the_fleet_needs_within_the_hard_one() -> None:
    need = files_needed(2000, 64)
    assert need == 2000 + 2 * 64 + 64
    assert run_child(1024, 8192, 2000) == {"limits": [need, 8192], "said": None}


def test_a_fleet_past_the_hard_limit_is_refused_naming_the_figures_and_the_fix() -> None:
    got = run_child(1024, 1024, 5000)
    assert got["limits"] == [1024, 1024]  # left as it was
    said, code = got["said"]  # type: ignore[misc]
    assert code == 3
    need = files_needed(5000, 64)
    assert "each of its 5000 hosts" in said and str(need) in said and "at most 1024" in said
    assert f"ulimit -n {need}" in said and "--limit" in said


@pytest.mark.parametrize("workers", [1, 64, 1024])
def test_the_need_grows_with_the_hosts_and_the_hosts_at_work(workers: int) -> None:
    assert files_needed(10, workers) < files_needed(11, workers)
    assert files_needed(10, workers) < files_needed(10, workers + 1)


LOCKS_CHILD = """
import json
from rollout.engine.locks import LockEvents, LockPolicy, fleet_locks, holder_for
from rollout.errors import EnvironmentProblem
opened = []
def open_host(name):
    opened.append(name)
    raise AssertionError("a host was touched")
events = LockEvents(print, print, print, print)
try:
    with fleet_locks([f"h{i}" for i in range(3000)], open_host,
                     holder_for("r", "op", "ctl", "v"), LockPolicy(), events, 64):
        pass
    said = None
except EnvironmentProblem as e:
    said = str(e)
print(json.dumps({"opened": opened, "said": said}))
"""


def test_a_run_past_the_hard_limit_touches_no_host() -> None:
    def limit() -> None:
        resource.setrlimit(resource.RLIMIT_NOFILE, (1024, 1024))

    out = subprocess.run([sys.executable, "-c", LOCKS_CHILD], preexec_fn=limit,
                         capture_output=True, text=True, timeout=60, check=True)
    got = json.loads(out.stdout.splitlines()[-1])
    assert got["opened"] == [] and "3000 hosts" in got["said"]


def test_a_limit_that_cannot_be_raised_is_refused_as_a_low_hard_limit(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A sandbox that refuses setrlimit even within the hard limit: the run is refused with
    the same words, naming the soft limit it is held to, never a traceback."""
    from rollout.engine import openfiles
    from rollout.errors import EnvironmentProblem

    def refuse(*_: object) -> None:
        raise ValueError("not allowed")

    monkeypatch.setattr(openfiles.resource, "getrlimit", lambda _: (256, 65536))
    monkeypatch.setattr(openfiles.resource, "setrlimit", refuse)
    with pytest.raises(EnvironmentProblem, match=r"at most 256 \(raising it to 1192 was"):
        openfiles.ensure_open_files(1000, 64)
