"""Step order is part of the schema: host steps run in phase order, each after a step it
needs, checked at load (exit 2, file:line); the engine's tables derive from one declaration."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from conftest import CliRunner

from rollout.config.steps import HOST_PHASES, step_order_problem
from rollout.engine import hostplan
from rollout.engine.hostplan import RULES
from rollout.steps.kinds import KINDS

REPO = Path(__file__).resolve().parents[2]
INVENTORY = """\
defaults:
  known_hosts: known_hosts
hosts:
  - {name: a, address: 127.0.0.1, port: 1}
"""
LAB = ["build", "extract", "preflight", "supervise", "upload", "preflight", "stop", "drain",
       "config", "switch", "start", "ready", "validate", "prune"]


def order(*kinds: str) -> tuple[int, str] | None:
    return step_order_problem([(f"s{i}", k) for i, k in enumerate(kinds)], RULES)


def test_every_host_kind_is_declared_once_with_its_phase() -> None:
    assert set(RULES) == set(KINDS)
    for rule in RULES.values():
        for phase in (rule.phase, rule.enters, rule.reaches):
            assert phase is None or phase in HOST_PHASES


def test_the_engine_tables_derive_from_the_declaration() -> None:
    assert hostplan.PHASE_AT_START == {"stop": hostplan.Phase.STOPPED,
                                       "switch": hostplan.Phase.SWITCHED,
                                       "start": hostplan.Phase.STARTED}
    assert hostplan.PHASE_AFTER == {"validate": hostplan.Phase.VALIDATED}
    assert set(hostplan.CHANGING) == {"supervise", "upload", "config", "stop", "drain", "switch",
                                      "start"}
    assert set(hostplan.BY_EVIDENCE) == {"ready", "preload", "validate"}


@pytest.mark.parametrize("kinds", [
    LAB,
    ["validate"],  # validate alone: the running daemon, judged by its ports' owners
    ["stop", "start"],  # a restart of what current points at
    ["preflight", "stop", "drain", "start", "ready"],
    ["prune", "upload", "switch", "validate", "prune"],  # prune anywhere
    ["build", "extract", "upload", "switch"],
    ["upload", "config", "switch", "start"],  # no stop: the config is written where it stands
])
def test_orders_that_load(kinds: list[str]) -> None:
    assert order(*kinds) is None


@pytest.mark.parametrize(("kinds", "at", "why"), [
    (["drain", "stop"], 0, "a drain step needs a step of kind stop before it"),
    (["upload", "config", "stop", "drain"], 1, "a config step must come after the stop step "
     "'s2'"),
    (["upload", "stop", "switch", "drain", "start"], 3, "a drain step (phase stopped) cannot "
     "come after step 's2' (switch, phase switched)"),
    (["upload", "start", "switch"], 2, "a switch step (phase switched) cannot come after step "
     "'s1' (start, phase started)"),
    (["switch", "start"], 0, "a switch step needs a step of kind upload before it"),
    (["ready", "start"], 0, "a ready step needs a step of kind start before it"),
    (["stop", "start", "validate", "ready"], 3, "a ready step (phase started) cannot come "
     "after step 's2' (validate, phase validated)"),
    (["stop", "start", "config"], 2, "a config step (phase stopped) cannot come after"),
    (["upload", "stop", "preflight"], 2, "a preflight step (phase untouched)"),
])
def test_orders_that_are_refused(kinds: list[str], at: int, why: str) -> None:
    problem = order(*kinds)
    assert problem is not None and problem[0] == at and why in problem[1], problem


def lab_playbook(tmp_path: Path, swap: tuple[str, str]) -> tuple[Path, int]:
    """The lab playbook with two step lines swapped; the new line of the second named."""
    text = (REPO / "playbooks" / "lab.yaml").read_text()
    lines = text.splitlines()
    a = next(i for i, x in enumerate(lines) if x.strip().startswith(f"- {{name: {swap[0]},"))
    b = next(i for i, x in enumerate(lines) if x.strip().startswith(f"- {{name: {swap[1]},"))
    lines[a], lines[b] = lines[b], lines[a]
    text = "\n".join(lines) + "\n"
    text = text.replace("../dockerfiles", str(REPO / "dockerfiles"))
    text = text.replace("source: files/c1.json", f"source: {REPO}/playbooks/files/c1.json")
    text = text.replace("params_source: files/", f"params_source: {REPO}/playbooks/files/")
    path = tmp_path / "play.yaml"
    path.write_text(text)
    return path, a + 1


@pytest.mark.parametrize(("swap", "why"), [
    (("stop", "drain"), "a drain step needs a step of kind stop before it"),
    (("start", "switch"), "a switch step (phase switched) cannot come after step 'start'"),
])
def test_out_of_order_playbook_exits_2_naming_file_and_line(
    cli: CliRunner, tmp_path: Path, swap: tuple[str, str], why: str
) -> None:
    (tmp_path / "fleet.yaml").write_text(INVENTORY)
    playbook, line = lab_playbook(tmp_path, swap)
    p = cli("rollout", "--hosts", str(tmp_path / "fleet.yaml"), "--playbook", str(playbook),
            "--dry-run", cwd=tmp_path)  # fmt: skip
    assert p.returncode == 2, p.stderr
    assert re.search(rf"{re.escape(str(playbook))}:{line}: steps\[\d+\]\.kind:", p.stderr), \
        p.stderr
    assert why in p.stderr and "Traceback" not in p.stderr, p.stderr
