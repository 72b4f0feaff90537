"""The validation runs under a timeout on the host: a proof that never answers is killed
there (its process group with it) and reported as hung, never waited for."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from contexts import AgentTransport, host_context, small_host
from processes import assert_ends

from rollout.host.layout import Layout
from rollout.steps import validate
from rollout.steps.base import HostContext
from rollout.steps.validate import run_bounded


def local_ctx(root: Path) -> HostContext:
    """This machine as a host rooted in a test's own folder (the proof removes the evidence
    file under the root first: never a shared path such as /tmp's), with its agent: the
    proof runs in a forked child of it, as on a host with an agent."""
    return host_context(small_host("local"), AgentTransport("local"), Layout(str(root)))


def test_a_command_that_answers_is_not_hung_and_its_output_is_kept(tmp_path: Path) -> None:
    proof = run_bounded(local_ctx(tmp_path), "echo 'status:    COMPLETED'; exit 0", 30)
    assert not proof.hung and proof.result.exit_code == 0
    assert proof.result.stdout == "status:    COMPLETED\n"


def test_a_command_that_fails_fast_is_not_hung(tmp_path: Path) -> None:
    proof = run_bounded(local_ctx(tmp_path), "echo 'Error: failed to connect' >&2; exit 1", 30)
    assert not proof.hung and proof.result.exit_code == 1
    assert "failed to connect" in proof.result.stderr


def test_a_command_still_running_at_its_timeout_is_killed_with_its_children(
    tmp_path: Path,
) -> None:
    pids = tmp_path / "pids"
    # a shell that does not exec its last command, and a grandchild: the whole group goes
    command = f"sleep 300 & echo $! > {pids}; sleep 300; wait"
    proof = run_bounded(local_ctx(tmp_path), command, 0.5)
    assert proof.hung and proof.result.exit_code in (124, 137)
    child = int(pids.read_text())
    assert child != os.getpid()
    assert_ends(child, "survived the validation's timeout")


def test_a_command_that_ignores_sigterm_is_killed_and_reported_hung(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setattr(validate, "KILL_AFTER", 0.2)  # SIGKILL 0.2 s after SIGTERM, not 5 s
    proof = run_bounded(local_ctx(tmp_path), "trap '' TERM; sleep 300", 0.5)
    assert proof.hung and proof.result.exit_code == 137  # timeout's SIGKILL, as sh reports it


def test_only_an_output_matching_the_pattern_leaves_the_evidence(tmp_path: Path) -> None:
    ctx = local_ctx(tmp_path)
    evidence = Path(ctx.layout.validated)
    evidence.parent.mkdir(parents=True, exist_ok=True)
    evidence.write_text("an earlier validation's\n")
    failed = run_bounded(ctx, "echo 'status:    FAILED'", 30, r"^status:\s+COMPLETED", '{"pid": 7}')
    assert not failed.recorded and not evidence.exists()  # the earlier evidence went first
    block = "printf '=== Proof Result ===\\nstatus:    COMPLETED\\n'"  # the bench's own block
    passed = run_bounded(ctx, block, 30, r"^status:\s+COMPLETED",
                         '{"pid": 7}')
    assert passed.recorded and evidence.read_text() == '{"pid": 7}\n'
    assert evidence.stat().st_mode & 0o077 == 0
