"""The example pipelines declare what a release pipeline needs (the GitHub one is also run
on the lab: tests/lab/test_ci_example.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ruamel.yaml import YAML

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "ci"


def _load(name: str) -> Any:
    return YAML(typ="safe", pure=True).load((EXAMPLES / name).read_text())


def test_github_workflow() -> None:
    jobs = _load("github-release.yml")["jobs"]
    assert [j for j in jobs if j.startswith("deploy")] == ["deploy-canary", "deploy-production"]
    assert jobs["deploy-canary"]["needs"] == "build"
    assert jobs["deploy-production"]["needs"] == "deploy-canary"
    groups = [jobs[j]["concurrency"] for j in ("deploy-canary", "deploy-production")]
    assert all(g["cancel-in-progress"] is False for g in groups)  # queue, never cancel
    assert len({g["group"] for g in groups}) == 2  # one queue per fleet
    uploads = [s for s in jobs["build"]["steps"] if "upload-artifact" in str(s.get("uses"))]
    assert uploads and uploads[0]["with"]["name"] == "release"
    for job in ("deploy-canary", "deploy-production"):
        runs = " ".join(str(s.get("run", "")) for s in jobs[job]["steps"])
        assert "--release dist/release" in runs and "rollout build" not in runs
        assert "--junit" in runs and "--summary" in runs
    text = (EXAMPLES / "github-release.yml").read_text()
    assert "${{ secrets.FLEET_SSH_KEY }}" in text and "PRIVATE KEY" not in text


def test_gitlab_pipeline() -> None:
    doc = _load("gitlab-ci.yml")
    assert doc["stages"] == ["build", "canary", "production"]
    assert "rollout build --out dist/release" in " ".join(doc["build"]["script"])
    assert doc["build"]["artifacts"]["paths"] == ["dist/release/"]
    canary, production = doc["deploy-canary"], doc["deploy-production"]
    assert production["needs"] == ["build", "deploy-canary"]
    assert {canary["resource_group"], production["resource_group"]} == {
        "fleet-canary", "fleet-production"}
    deploy = doc[".deploy"]
    assert "--release dist/release" in " ".join(deploy["script"])
    assert deploy["artifacts"]["reports"]["junit"] == "reports/junit.xml"
