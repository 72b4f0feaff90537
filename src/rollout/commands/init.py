"""`rollout init`: write a working project into a folder: the project file (rollout.yaml),
a playbook for the operator's case, an inventory and a CI file, every value commented.

The playbook is the shipped one (the real cuzk build, or the lab's stand-in) with the
operator's choices written in and its paths made absolute, so that it works from the new
folder. Files are created, never written through a link, and an existing one is refused
unless `force`."""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass
from pathlib import Path
from string import Template

from rollout import __version__
from rollout.config.params_manifest import kind, kinds
from rollout.config.playbook import DEFAULT_PLAYBOOK, LAB_PLAYBOOK, PLAYBOOKS
from rollout.errors import UserError

TEMPLATES = Path(__file__).resolve().parent.parent / "resources/init"
RESOURCES = PLAYBOOKS.parent
CI_FILES = {"github": ".github/workflows/rollout.yml", "gitlab": ".gitlab-ci.yml"}
CORDONS = ("curio", "none")


@dataclass(frozen=True)
class Choices:
    """What the operator chose (flags or answers)."""

    lab_inventory: str | None = None  # the lab's fleet.yaml: a project for the lab
    build: str | None = None  # a curio checkout to build from
    bundles: bool = False  # deploy bundles built by CI (--release)
    cordon: str = "curio"
    proof: str = "porep-32g"
    vastai: str | None = None  # a vast.ai label for the inventory
    ci: str = "github"

    def check(self) -> None:
        """UserError (exit 2) for a choice rollout cannot write."""
        if self.cordon not in CORDONS:
            raise UserError(f"--cordon {self.cordon!r}: one of {', '.join(CORDONS)}")
        if self.ci not in CI_FILES:
            raise UserError(f"--ci {self.ci!r}: one of {', '.join(CI_FILES)}")
        if self.proof not in kinds():
            raise UserError(f"--proof {self.proof!r}: one of {', '.join(kinds())}")
        if self.build and self.bundles:
            raise UserError("--build PATH or --bundles, not both")


def _quoted(value: str) -> str:
    """A value as a YAML double-quoted scalar: data, whatever characters it holds."""
    return json.dumps(value)


def _replace(text: str, pattern: str, new: str, count: int = 1) -> str:
    out, found = re.subn(pattern, new, text, flags=re.MULTILINE)
    if found != count:  # the shipped playbook changed: a bug here, not the operator's
        raise RuntimeError(f"init: {pattern!r} matched {found} times in the shipped playbook")
    return out


def playbook_text(choices: Choices) -> str:
    """The shipped playbook with the choices written in and its paths absolute."""
    lab = choices.lab_inventory is not None
    text = (LAB_PLAYBOOK if lab else DEFAULT_PLAYBOOK).read_text(encoding="utf-8")
    header = "# Written by `rollout init` from rollout's shipped playbook; edit it freely.\n"
    text = header + text.replace("../dockerfiles", str(RESOURCES / "dockerfiles"))
    if lab:
        text = _replace(text, r"(?<=: )files/", f"{PLAYBOOKS}/files/", count=2)
        if choices.cordon == "none":
            text = _replace(text, r"^  (un)?cordon: .*\n", "", count=2)
        return text
    text = _replace(text, r"^  proof_kind: porep-32g", f"  proof_kind: {choices.proof}")
    text = _replace(text, r"-t, porep,", f"-t, {kind(choices.proof).bench_type},")
    if choices.build:
        checkout = str(Path(choices.build).expanduser().absolute())
        text = _replace(text, r"^  curio_dir: ~/curio", f"  curio_dir: {_quoted(checkout)}")
    if choices.cordon == "curio":
        text = _replace(text, r"^# (work:|  \w+: .*)$", r"\1", count=6)
    return text


def inventory_text(choices: Choices) -> str:
    vastai = ""
    if choices.vastai:
        vastai = (f"vastai:                           # also the running vast.ai instances\n"
                  f"  label: {_quoted(choices.vastai)}   # whose label matches (a glob)\n")
    return Template((TEMPLATES / "fleet.yaml").read_text()).substitute(vastai=vastai)


def project_files(choices: Choices) -> dict[str, str]:
    """Each file's path (relative to the project's folder) and text."""
    choices.check()
    inventory = choices.lab_inventory or "fleet.yaml"
    playbook = "playbooks/lab.yaml" if choices.lab_inventory else "playbooks/prover.yaml"
    files = {
        "rollout.yaml": Template((TEMPLATES / "rollout.yaml").read_text()).substitute(
            inventory=_quoted(inventory), playbook=_quoted(playbook)),
        playbook: playbook_text(choices),
    }
    if choices.lab_inventory is None:
        files["fleet.yaml"] = inventory_text(choices)
    release = '--release "$ROLLOUT_RELEASE" ' if choices.bundles else ""
    ci = Template((TEMPLATES / f"{choices.ci}.yml").read_text())
    files[CI_FILES[choices.ci]] = ci.substitute(version=__version__, release_flag=release)
    return files


def write_project(folder: Path, files: dict[str, str], force: bool = False) -> list[Path]:
    """Write `files` under `folder`: all refused (nothing written) when one exists and not
    `force`; never through a link (a folder or file that is a link is refused)."""
    existing = [name for name in files if os.path.lexists(folder / name)]
    if existing and not force:
        raise UserError(f"{', '.join(existing)} already exist(s) in {folder}: "
                        "nothing written (--force replaces them)")
    written = []
    for name, text in files.items():
        path = folder / name
        _make_parents(folder, path.parent)
        if path.is_symlink():
            raise UserError(f"{path} is a link: rollout init never writes through one")
        flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC
        with os.fdopen(os.open(path, flags, 0o644), "w", encoding="utf-8") as f:
            f.write(text)
        written.append(path)
    return written


def _make_parents(folder: Path, parent: Path) -> None:
    """Create the folders from `folder` down to `parent`, refusing one that is a link."""
    current = folder
    for part in parent.relative_to(folder).parts:
        current = current / part
        if current.is_symlink():
            raise UserError(f"{current} is a link: rollout init never writes through one")
        current.mkdir(exist_ok=True)
