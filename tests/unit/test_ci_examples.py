"""The example pipelines declare what a release pipeline needs (the GitHub one is also run
on the lab: tests/lab/test_ci_example.py)."""

from __future__ import annotations

import re
import subprocess
import tomllib
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


REPO = EXAMPLES.parents[1]
# "rollout" on PyPI is an unrelated 2011 Django package: nothing may tell anyone to install it.
FOREIGN = re.compile(
    r"""(?<![\w-])rollout==|pip install(?:\s+--?[\w-]+)*\s+['"]?rollout(?:\[|['"]?(?:\s|$))""",
    re.MULTILINE)


def test_the_distribution_has_a_name_of_its_own() -> None:
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    assert project["name"] == "cuzk-rollout"
    assert project["scripts"] == {"rollout": "rollout.cli:main"}  # the command stays


def _pinned() -> str:
    version = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["version"]
    return f"cuzk-rollout=={version}"


def test_github_jobs_install_the_pinned_release_with_a_timeout_and_a_pip_cache() -> None:
    github = _load("github-release.yml")
    assert github["env"]["ROLLOUT_PACKAGE"] == _pinned()  # never the pipeline's checkout
    for name, job in github["jobs"].items():
        runs = [str(s.get("run", "")) for s in job["steps"]]
        assert 'python -m pip install --quiet "$ROLLOUT_PACKAGE"' in runs, name
        assert 0 < job["timeout-minutes"] <= 360, name
        [python] = [s for s in job["steps"] if "setup-python" in str(s.get("uses"))]
        assert python["with"]["cache"] == "pip" and python["with"]["cache-dependency-path"]


def test_gitlab_jobs_install_the_pinned_release_with_a_timeout_and_a_pip_cache() -> None:
    gitlab = _load("gitlab-ci.yml")
    assert gitlab["variables"]["ROLLOUT_PACKAGE"] == _pinned()
    installs = [*gitlab["default"]["before_script"], *gitlab["build"]["before_script"]]
    assert sum('install --quiet' in line and '"$ROLLOUT_PACKAGE"' in line
               for line in installs) == 2
    assert gitlab["variables"]["PIP_CACHE_DIR"].endswith("/.cache/pip")
    assert gitlab["default"]["cache"]["paths"] == [".cache/pip"]
    for job in ("build", "deploy-canary", "deploy-production"):
        assert gitlab[job].get("timeout") or gitlab["default"]["timeout"], job


def test_no_file_installs_the_foreign_rollout_package() -> None:
    listed = subprocess.run(["git", "-C", str(REPO), "ls-files"], capture_output=True,
                            text=True, check=True).stdout.split()
    texts = {name: (REPO / name).read_text(errors="replace") for name in listed
             if name.endswith((".md", ".yml", ".yaml", ".py", ".toml", ".sh"))
             and (REPO / name).is_file() and name != "tests/unit/test_ci_examples.py"}
    assert [n for n, text in texts.items() if FOREIGN.search(text)] == []
    assert FOREIGN.search('pip install "rollout==0.1.0"') and FOREIGN.search(
        "pip install --quiet 'rollout[s3]'") and FOREIGN.search("pip install rollout\n")
    assert not FOREIGN.search("pip install './[s3]' in rollout's checkout")
    assert not FOREIGN.search('pip install "cuzk-rollout==0.1.0"')
