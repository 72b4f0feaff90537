"""Validation evidence (issue 18): success only from the bench's own result block, on stdout,
once; a release is validated with its own command (its own bench, its own paths), by the
validate step, by a rollback and by the guard alike."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from contexts import host_context, small_host
from test_engine import NEW, OLD, Fleet

from rollout.host.layout import Layout
from rollout.host.scripts import judge, ops
from rollout.host.scripts.common import proof_verdict
from rollout.steps.base import HostContext
from rollout.steps.validate import run_bounded

PATTERN = r"^status:\s+COMPLETED"
PASSED = "\n=== Proof Result ===\nstatus:    COMPLETED\njob_id:    j1\n"
FAILED = "\n=== Proof Result ===\nstatus:    FAILED\njob_id:    j1\nerror:     bad proof\n"


def test_the_bench_s_own_completed_block_passes() -> None:
    assert proof_verdict("INFO loading\n" + PASSED + "\nINFO done\n", PATTERN) == (
        True, "status COMPLETED")


@pytest.mark.parametrize(
    ("stdout", "why"),
    [
        (FAILED + "status:    COMPLETED\n", "2 status lines"),  # forged, right after the block
        (FAILED + "\nstatus:    COMPLETED\n", "status FAILED: bad proof"),  # after a blank line
        ("status:    COMPLETED\n", "no result block"),  # no block at all
        (FAILED + PASSED, "2 result blocks"),  # a second block, whatever it says
        (PASSED + FAILED, "2 result blocks"),
        ("status:    FAILED\n" + PASSED, "a FAILED status line outside the result block"),
        ("=== Proof Result ===\njob_id: 1\n\nstatus:    COMPLETED\n", "0 status lines"),
        ("=== Proof Result ===\nstatus:    COMPLETEDX\n", "status COMPLETEDX"),
        ("", "no result block"),
    ],
)
def test_anything_but_one_completed_block_fails(stdout: str, why: str) -> None:
    passed, reason = proof_verdict(stdout, PATTERN)
    assert not passed and why in reason, reason


def test_the_success_pattern_is_read_inside_the_block_only() -> None:
    assert not proof_verdict("proof: 192 bytes\n" + PASSED, r"^proof:")[0]
    assert proof_verdict(PASSED.replace("job_id", "proof:  192 bytes\njob_id"), r"^proof:")[0]


def local_ctx(tmp_path: Path) -> HostContext:
    """This machine as a host with its agent (the proof runs in a forked child of it)."""
    from contexts import AgentTransport

    return host_context(small_host("local"), AgentTransport("local"), Layout(str(tmp_path)))


@pytest.mark.parametrize(
    "command",
    [
        f"printf '{FAILED}'; echo 'status:    COMPLETED'",  # a forged line after FAILED
        f"printf '{PASSED}' >&2",  # the right block, but on stderr
        f"printf '{FAILED}{PASSED}'",  # two blocks
    ],
)
def test_the_host_never_records_evidence_of_a_forged_success(tmp_path: Path,
                                                             command: str) -> None:
    ctx = local_ctx(tmp_path)
    Path(ctx.layout.validated).parent.mkdir(parents=True, exist_ok=True)
    proof = run_bounded(ctx, command, 30, PATTERN, '{"pid": 7}')
    assert not proof.recorded and not Path(ctx.layout.validated).exists()
    assert run_bounded(ctx, f"printf '{PASSED}'", 30, PATTERN, '{"pid": 7}').recorded


def test_the_guard_reads_stdout_only_and_one_block(tmp_path: Path) -> None:
    def verdict(command: str) -> str:
        """What the guard makes of the proof it ran (ops.prove, as the validate step runs it)."""
        kwargs = {"command": command, "timeout": 30, "kill_after": 5, "pattern": PATTERN,
                  "release": "r1"}
        report = ops.prove(**kwargs)  # type: ignore[arg-type]
        status, reason, _ = judge.verdict("validate", [{"call": "prove", "kwargs": kwargs}],
                                          [report])
        return status if status == "ok" else reason

    (tmp_path / "releases" / "r1").mkdir(parents=True)
    (tmp_path / "current").symlink_to("releases/r1")
    assert verdict(f"printf '{PASSED}'") == "ok"
    assert "no result block" in verdict(f"printf '{PASSED}' >&2")
    assert "2 status lines" in verdict(f"printf '{FAILED}'; echo 'status: COMPLETED'")


def _bench_paths(fleet: Fleet, name: str) -> list[str]:
    return [json.loads(c.split(" ", 2)[2])["command"] for c in fleet.hosts[name].sent
            if c.startswith("call ops.prove ")]


def test_a_rollback_validates_with_the_release_it_goes_back_to(tmp_path: Path) -> None:
    """The new release fails its validation; the rollback proves the old daemon with the old
    release's own bench, never the new one's."""
    fleet = Fleet(tmp_path, ["h1"]).serving(OLD)
    host = fleet.hosts["h1"]
    host.faults, host.bad_release = {"validate"}, NEW
    host.sent.clear()
    summary = fleet.roll(NEW)
    assert summary.outcomes["h1"].status == "rolled_back", summary.outcomes["h1"]
    benches = _bench_paths(fleet, "h1")
    assert len(benches) >= 2, host.sent
    assert all(f"/releases/{NEW}/cuzk-bench" in c for c in benches[:-1]), benches
    assert f"/releases/{OLD}/cuzk-bench" in benches[-1], benches  # the rollback's own
    assert fleet.steps("h1")["rollback-validate"].status == "ok"


def test_a_bundle_lacking_an_executable_the_playbook_needs_is_refused(tmp_path: Path) -> None:
    from test_engine import release

    from rollout.engine.needs import needed_executables, refuse_incomplete
    from rollout.errors import UserError
    from rollout.steps.decision import Release

    fleet = Fleet(tmp_path, ["h1", "h2"])
    plan = fleet.plan()
    full = release(tmp_path, NEW)
    assert set(needed_executables(plan, full)) == {"cuzk-daemon", "cuzk-bench"}
    refuse_incomplete(plan, full, "dist/x")  # complete: nothing to say
    for lacking in ("cuzk-bench", "cuzk-daemon"):
        partial = Release(NEW, "img", NEW, tuple(a for a in full.artifacts if a.name != lacking))
        with pytest.raises(UserError) as info:
            refuse_incomplete(plan, partial, "dist/x")
        assert info.value.exit_code == 2
        assert f"--release dist/x: the bundle of release {NEW} lacks {lacking}" in str(info.value)
    assert not any(h.sent for h in fleet.hosts.values())  # no host was asked anything
