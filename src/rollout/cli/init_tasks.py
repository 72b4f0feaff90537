"""`rollout init`: write a working project (rollout.yaml, a playbook, an inventory, a CI
file) into the current folder, from flags or, on a terminal, from answers."""

from __future__ import annotations

import os
import sys
from pathlib import Path

from invoke.context import Context

from rollout.cli.errors import reports_errors
from rollout.cli.taskdef import task


def ask(question: str, default: str) -> str:
    """The operator's answer on a terminal (empty: the default); the default otherwise."""
    if not sys.stdin.isatty():
        return default
    answer = input(f"{question} [{default}]: ").strip()
    return answer or default


def lab_inventory() -> str:
    from rollout.lab.fleet import lab_dir  # the lab's module only for `init --lab`

    return str(lab_dir() / "fleet.yaml")


@task(
    help={
        "lab": "A project for the lab fleet: its inventory (lab/fleet.yaml, or "
        "$ROLLOUT_LAB_DIR's) and the lab's stand-in playbook.",
        "build": "Build cuzk from this curio checkout (the playbook's curio_dir).",
        "bundles": "Deploy bundles built by CI (`rollout build`, `rollout publish`): the CI "
        "file rolls out --release \"$ROLLOUT_RELEASE\".",
        "cordon": "curio: cordon each host through curio while its proofs end (default); "
        "none: no cordon.",
        "proof": "The validation's proof kind: porep-32g (default), snap-32g, wpost-32g, "
        "winning-32g (the 32 GiB kinds cuzk proves).",
        "vastai": "Also the running vast.ai instances whose label matches LABEL.",
        "ci": "github (.github/workflows/rollout.yml, default) or gitlab (.gitlab-ci.yml).",
        "force": "Replace files that exist (never through a link).",
    },
)
@reports_errors
def init(c: Context, lab: bool = False, build: str | None = None, bundles: bool = False,
         cordon: str | None = None, proof: str | None = None, vastai: str | None = None,
         ci: str | None = None, force: bool = False) -> None:
    """Write a working project here: rollout.yaml, a playbook, fleet.yaml and a CI file."""
    from rollout.commands.init import Choices, project_files, write_project

    asked = not (lab or build or bundles)
    if asked and ask("build from a curio checkout (a path) or deploy CI's bundles (bundles)?",
                     "bundles") != "bundles":
        build = ask("curio checkout", "~/curio")
    choices = Choices(
        lab_inventory=lab_inventory() if lab else None,
        build=build,
        bundles=bundles or (asked and build is None),
        cordon=cordon or ask("cordon through curio (curio) or not (none)?", "curio"),
        proof=proof or ("lab-porep" if lab else ask("proof kind", "porep-32g")),
        vastai=vastai,
        ci=ci or ask("CI: github or gitlab?", "github"),
    )
    for path in write_project(Path(os.getcwd()), project_files(choices), force):
        print(f"wrote {path}")
    first = "`rollout lab.up` (if the lab is not up)" if lab else "edit fleet.yaml (or use --hosts)"
    print(f"next: {first}, then `rollout rollout --dry-run`")
