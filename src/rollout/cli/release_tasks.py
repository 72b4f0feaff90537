"""`rollout build` (a release bundle) and `rollout publish` (where hosts can fetch it)."""

from __future__ import annotations

from pathlib import Path

from invoke.context import Context

from rollout.cli.errors import reports_errors
from rollout.cli.rollout_tasks import PLAYBOOK_HELP, playbook_file
from rollout.cli.taskdef import task
from rollout.errors import UserError


@task(
    iterable=["set_"],
    help={
        "out": "Folder to write the bundle to (the executables and manifest.json).",
        "playbook": PLAYBOOK_HELP,
        "set_": "Override a playbook variable, KEY=VALUE (repeatable), like Ansible's -e: "
        "the value is a string (1.10 stays 1.10); one starting with { or [ is JSON/YAML; "
        "@FILE reads a YAML/JSON file of variables, typed as written.",
        "verbose": "Print every line of the Docker build's output (escaped).",
    },
)
@reports_errors
def build(
    c: Context, out: str = "", playbook: str | None = None, set_: list[str] | None = None,
    verbose: bool = False,
) -> None:
    """Build the release once and write it as a bundle; deploy it with --release."""
    if not out:
        raise UserError("rollout build needs --out DIR: the folder to write the bundle to")
    # for start-up time: --version and --help load no command
    from rollout.commands import app

    manifest = app.run_build(playbook_file(playbook), tuple(set_ or ()), Path(out), verbose)
    print(f"release {manifest.release} (version {manifest.version}) written to {out}")


@task(
    help={
        "folder": "The bundle folder (from `rollout build`).",
        "to": "Where to put it: https://..., http://... (PUT), s3://BUCKET/PREFIX (needs "
        "the s3 extra) or a folder. Hosts then download it with --release URL.",
    },
)
@reports_errors
def publish(c: Context, folder: str, to: str = "") -> None:
    """Put a release bundle where hosts can download it themselves (--release URL)."""
    if not to:
        raise UserError("rollout publish needs --to URL: where the hosts will download it")
    from rollout.bundle.publish import publish as publish_bundle  # loaded when the task runs

    manifest = publish_bundle(Path(folder), to)
    print(f"release {manifest.release} (version {manifest.version}) published to {to}")
