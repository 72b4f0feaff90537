"""A small runner for a GitHub Actions workflow file: runs its jobs' `run:` steps in order,
on this machine, the way the hosted runner would, so that an example pipeline is tested
as written.

Jobs run one after another in `needs` order, each in a fresh copy of the workspace (jobs
share nothing but artifacts, as on GitHub). Expressions `${{ secrets.X }}`, `${{ vars.X }}`,
`${{ env.X }}` and `${{ github.X }}` are filled in; any other expression is an error, so an
example cannot use what the runner does not understand. `uses:` steps: checkout and
setup-python are already done here; upload-artifact and download-artifact copy folders
through a local store. `if: always()` runs a step after a failure. With `fresh_python`,
setup-python gives the job a virtual environment of its own (as a hosted runner's fresh
Python: nothing installed), first on the job's PATH; steps with an `id` in `skip_ids` are
skipped (none by default: the install step runs as written).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ruamel.yaml import YAML

EXPRESSION = re.compile(r"\$\{\{\s*([a-z]+)\.([A-Za-z_][A-Za-z0-9_]*)\s*\}\}")


@dataclass
class StepRun:
    job: str
    name: str
    command: str
    code: int
    output: str


@dataclass
class Runner:
    workflow: Path
    workspace_template: Path  # what a checkout gives each job
    work: Path
    secrets: dict[str, str] = field(default_factory=dict)
    github: dict[str, str] = field(default_factory=dict)
    job_env: dict[str, dict[str, str]] = field(default_factory=dict)
    skip_ids: frozenset[str] = frozenset()
    fresh_python: bool = True
    runs: list[StepRun] = field(default_factory=list)

    def load(self) -> dict[str, Any]:
        return YAML(typ="safe", pure=True).load(self.workflow.read_text())  # type: ignore[no-any-return]

    def job_order(self) -> list[str]:
        jobs = self.load()["jobs"]
        order: list[str] = []
        while len(order) < len(jobs):
            ready = [n for n, j in jobs.items() if n not in order
                     and all(d in order for d in _needs(j))]
            assert ready, f"jobs with unmet needs: {set(jobs) - set(order)}"
            order.append(ready[0])
        return order

    def run(self) -> dict[str, bool]:
        """Every job in order; a job whose needs failed is not run. {job: succeeded}."""
        doc = self.load()
        results: dict[str, bool] = {}
        for name in self.job_order():
            job = doc["jobs"][name]
            if not all(results.get(d) for d in _needs(job)):
                results[name] = False
                continue
            results[name] = self._job(name, job, {**(doc.get("env") or {})})
        return results

    def _job(self, name: str, job: dict[str, Any], env: dict[str, Any]) -> bool:
        workspace = self.work / "jobs" / name
        shutil.rmtree(workspace, ignore_errors=True)
        shutil.copytree(self.workspace_template, workspace)
        summary = self.work / "step-summaries" / f"{name}.md"
        summary.parent.mkdir(parents=True, exist_ok=True)
        summary.touch()
        base = {**os.environ, **{f"GITHUB_{k.upper()}": v for k, v in self.github.items()},
                "GITHUB_STEP_SUMMARY": str(summary), "GITHUB_JOB": name, "CI": "true"}
        base |= {k: self._fill(str(v), base) for k, v in {**env, **(job.get("env") or {})}.items()}
        base |= self.job_env.get(name, {})
        ok = True
        for step in job["steps"]:
            condition = str(step.get("if", "success()"))
            if (not ok and "always()" not in condition) or step.get("id") in self.skip_ids:
                continue
            if self.fresh_python and str(step.get("uses", "")).startswith(
                    "actions/setup-python"):
                base["PATH"] = f"{self._python(name)}:{base.get('PATH', '')}"
            step_env = {**base, **{k: self._fill(str(v), base)
                                   for k, v in (step.get("env") or {}).items()}}
            ok = self._step(name, step, workspace, step_env) and ok
        return ok

    def _python(self, job: str) -> Path:
        """A fresh virtual environment for one job; its bin folder."""
        venv = self.work / "pythons" / job
        shutil.rmtree(venv, ignore_errors=True)
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=300,
                       env={k: v for k, v in os.environ.items() if k != "VIRTUAL_ENV"})
        return venv / "bin"

    def _fill(self, text: str, env: dict[str, str]) -> str:
        def value(m: re.Match[str]) -> str:
            scope, key = m.group(1), m.group(2)
            source = {"secrets": self.secrets, "github": self.github, "env": env,
                      "vars": {}}.get(scope)
            if source is None or key not in source:
                raise AssertionError(f"the runner has no value for ${{{{ {scope}.{key} }}}}")
            return source[key]

        return EXPRESSION.sub(value, text)

    def _step(self, job: str, step: dict[str, Any], workspace: Path, env: dict[str, str]) -> bool:
        if "uses" in step:
            return self._uses(str(step["uses"]), step.get("with") or {}, workspace)
        command = self._fill(str(step["run"]), env)
        assert "${{" not in command, f"unfilled expression in {command!r}"
        p = subprocess.run(["bash", "-e", "-o", "pipefail", "-c", command], cwd=workspace,
                           env=env, capture_output=True, text=True, timeout=900)
        self.runs.append(StepRun(job, str(step.get("name", command[:40])), command,
                                 p.returncode, p.stdout + p.stderr))
        return p.returncode == 0

    def _uses(self, action: str, with_: dict[str, Any], workspace: Path) -> bool:
        name = action.split("@", 1)[0]
        store = self.work / "artifacts" / str(with_.get("name", ""))
        if name in ("actions/checkout", "actions/setup-python"):
            return True
        if name == "actions/upload-artifact":
            for line in str(with_["path"]).split():
                source = workspace / line
                if source.exists():
                    shutil.copytree(source, store / line, dirs_exist_ok=True)
            return True
        if name == "actions/download-artifact":
            # Like download-artifact@v4: the artifact's files land in `path`.
            files = [p for p in store.rglob("*") if p.is_file()]
            for src in files:
                rel = src.relative_to(store)
                dest = workspace / str(with_["path"]) / Path(*rel.parts[-1:])
                dest.parent.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(src, dest)  # artifacts do not keep file modes
            return bool(files)
        raise AssertionError(f"the runner does not know the action {action}")


def _needs(job: dict[str, Any]) -> list[str]:
    needs = job.get("needs") or []
    return [needs] if isinstance(needs, str) else list(needs)
