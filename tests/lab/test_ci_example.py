"""The GitHub example pipeline (examples/ci/github-release.yml), run as written on the lab:
install rollout (a wheel of this working tree, in place of the pinned release) into each
job's fresh Python, build once, then deploy
the bundle to the canary fleet (lab-1) and the production fleet (lab-2, lab-3) with no
Docker engine reachable, credentials from the "secret store"."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from junitparser import JUnitXml
from ruamel.yaml import YAML

from .conftest import LabFleet
from .gha_runner import Runner
from .rollout_helpers import REPO, assert_serving, reset_host, sh

pytestmark = pytest.mark.lab
WORKFLOW = REPO / "examples" / "ci" / "github-release.yml"
FLEETS = {"canary": ["lab-1"], "production": ["lab-2", "lab-3"]}
NO_DOCKER = "unix:///nonexistent/docker.sock"


def _source(root: Path) -> None:
    """rollout's own files, as this working tree has them, git-ignored ones left out (the
    wheel the pipeline installs is built from them)."""
    listed = subprocess.run(
        ["git", "-C", str(REPO), "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        check=True, capture_output=True).stdout.decode().split("\0")
    for name in filter(None, listed):
        source, copy = REPO / name, root / name
        copy.parent.mkdir(parents=True, exist_ok=True)
        if source.is_symlink():  # playbooks/ and dockerfiles/ point into the package
            copy.symlink_to(source.readlink())
        elif source.is_file():
            shutil.copy2(source, copy)


def _checkout(fleet_path: Path, root: Path) -> Path:
    """What the pipeline's repository holds: rollout's source, one inventory per fleet, its
    playbook, no credentials."""
    yaml = YAML(typ="safe", pure=True)
    lab = yaml.load(fleet_path.read_text())
    _source(root)
    (root / "fleets").mkdir(parents=True)
    for fleet, names in FLEETS.items():
        inventory = {
            "defaults": {**lab["defaults"], "key_file": "keys/deploy",
                         "known_hosts": "known_hosts"},
            "hosts": [h for h in lab["hosts"] if h["name"] in names],
        }
        with (root / "fleets" / f"{fleet}.yaml").open("w") as f:
            yaml.dump(inventory, f)
    # Its own playbooks/rollout.yaml: here the lab's (the stand-in build), paths made absolute.
    text = (REPO / "playbooks" / "lab.yaml").read_text()
    text = text.replace("../dockerfiles", str(REPO / "dockerfiles"))
    text = text.replace(" files/", f" {REPO}/playbooks/files/")
    (root / "playbooks" / "rollout.yaml").write_text(text)
    return root


def _wheel(source: Path, out: Path) -> str:
    """This working tree as a wheel: what the pipeline installs in place of its pinned
    release (its ROLLOUT_PACKAGE, which a pipeline sets to a release URL)."""
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "-w",
                    str(out), str(source)], check=True, timeout=600)
    (wheel,) = out.glob("cuzk_rollout-*.whl")
    return str(wheel)


def test_github_example_builds_once_and_deploys_canary_first(
    lab_fleet: LabFleet, tmp_path: Path
) -> None:
    for host in lab_fleet.hosts:
        reset_host(host.name)
    lab_dir = lab_fleet.fleet_path.parent
    path = "/usr/local/bin:/usr/bin:/bin"  # not the test's Python: setup-python gives a fresh one
    checkout = _checkout(lab_fleet.fleet_path, tmp_path / "checkout")
    jobs = {"PATH": path, "ROLLOUT_PACKAGE": _wheel(checkout, tmp_path / "wheels")}
    runner = Runner(
        WORKFLOW,
        checkout,
        tmp_path,
        secrets={"FLEET_SSH_KEY": (lab_dir / "keys" / "id_ed25519").read_text(),
                 "FLEET_KNOWN_HOSTS": (lab_dir / "known_hosts").read_text()},
        github={"ref_name": "v-ci1"},
        job_env={"build": jobs,
                 "deploy-canary": {**jobs, "DOCKER_HOST": NO_DOCKER},
                 "deploy-production": {**jobs, "DOCKER_HOST": NO_DOCKER}},
    )
    results = runner.run()
    failed = [r for r in runner.runs if r.code]
    assert results == {"build": True, "deploy-canary": True, "deploy-production": True}, (
        failed[0].output[-3000:] if failed else results)
    assert [r.job for r in runner.runs if r.command.startswith("rollout ")] == [
        "build", "deploy-canary", "deploy-production"]  # built once, canary first
    installs = [r for r in runner.runs if r.name == "Install rollout"]
    assert [r.job for r in installs] == ["build", "deploy-canary", "deploy-production"]
    for job in ("build", "deploy-canary", "deploy-production"):  # each job's own rollout
        venv = tmp_path / "pythons" / job
        shown = subprocess.run([venv / "bin" / "python", "-m", "pip", "show", "cuzk-rollout"],
                               capture_output=True, text=True)
        assert shown.returncode == 0 and "Name: cuzk-rollout" in shown.stdout, shown.stderr
        assert (venv / "bin" / "rollout").exists()

    release = json.loads((tmp_path / "artifacts/release/dist/release/manifest.json").read_text())
    for host in ("lab-1", "lab-2", "lab-3"):
        assert sh(host, "readlink /data/current").strip() == f"releases/{release['release']}"
        assert assert_serving(host) == "v-ci1"

    for fleet, hosts in FLEETS.items():
        job = tmp_path / "jobs" / f"deploy-{fleet}"
        (suite,) = list(JUnitXml.fromfile(str(job / "reports" / "junit.xml")))
        cases = {case.name: case for case in suite}
        assert set(cases) == {"controller", *hosts}
        assert suite.failures == 0 and suite.errors == 0
        summary = (job / "reports" / "summary.md").read_text()
        assert all(h in summary for h in hosts)
        step_summary = (tmp_path / "step-summaries" / f"deploy-{fleet}.md").read_text()
        assert summary.strip() in step_summary
        (journal,) = (job / "runs").glob("*.jsonl")
        events = [json.loads(line) for line in journal.read_text().splitlines()]
        build = next(e for e in events if e["kind"] == "step_end" and e["step"] == "build")
        assert build["status"] == "skipped" and "bundle built elsewhere" in build["reason"]
