"""`rollout init` as a new user runs it (issue 29's acceptance): from an empty folder, with
only the installed `rollout` command, `init --lab` writes a project; then `rollout rollout`
with no `-p` and no `--hosts` rolls the lab, and `status`, a single step and `rollback` in
that folder each print the project's playbook line."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from .conftest import LabFleet
from .rollout_helpers import FAST_KNOBS, _env, assert_serving, reset_host

pytestmark = pytest.mark.lab
ROLLOUT = Path(sys.executable).parent / "rollout"  # the console script, as pip installs it


def rollout(project: Path, runs: Path, lab: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """The installed command, run in the project's folder (no checkout path anywhere).

    The lab the session started lives in its own folder (`lab.up` run elsewhere), so the
    command is told where, as an operator whose lab is not `./lab` tells it."""
    env = _env(runs, {"ROLLOUT_LAB_DIR": str(lab)})
    return subprocess.run([str(ROLLOUT), *args], cwd=project, env=env,
                          capture_output=True, text=True, timeout=300)


def test_init_lab_then_every_command_uses_the_project(lab_fleet: LabFleet,
                                                      tmp_path: Path) -> None:
    hosts = [h.name for h in lab_fleet.hosts]
    for host in hosts:
        reset_host(host)
    project = tmp_path / "project"
    project.mkdir()
    lab = lab_fleet.fleet_path.parent
    made = rollout(project, tmp_path, lab, "init", "--lab")
    assert made.returncode == 0, made.stdout + made.stderr
    assert sorted(p.relative_to(project).as_posix() for p in project.rglob("*")
                  if p.is_file()) == [".github/workflows/rollout.yml", "playbooks/lab.yaml",
                                      "rollout.yaml"]
    assert "rollout lab.up" in made.stdout and "fleet.yaml" not in made.stdout.split("next:")[1]
    lines = (project / "rollout.yaml").read_text().splitlines()
    number = {line.split(":")[0]: n for n, line in enumerate(lines, 1) if ": " in line}
    used = (f"playbook: {project}/playbooks/lab.yaml ({project}/rollout.yaml:"
            f"{number['playbook']}); inventory: {lab_fleet.fleet_path} "
            f"({project}/rollout.yaml:{number['inventory']})")
    fast = ("--set", f"lab_knobs={FAST_KNOBS}", "--set", "ready_timeout=15")
    for version in ("init-1", "init-2"):
        run = rollout(project, tmp_path, lab, "rollout", "--set", f"version={version}", *fast)
        assert run.returncode == 0, run.stderr[-3000:]
        assert run.stderr.splitlines()[0] == used, run.stderr[:500]
    assert {h: assert_serving(h) for h in hosts} == dict.fromkeys(hosts, "init-2")
    for args in (("status",), ("validate", hosts[0]), ("rollback",)):
        run = rollout(project, tmp_path, lab, *args)
        assert run.returncode == 0, f"{args}: {run.stdout}{run.stderr[-3000:]}"
        assert used in run.stderr.splitlines(), f"{args}: {run.stderr[:500]}"
    assert {h: assert_serving(h) for h in hosts} == dict.fromkeys(hosts, "init-1")
