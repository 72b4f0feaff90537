"""The project file, `rollout.yaml`: the inventory, the playbook and the options' defaults of
one fleet, as Kamal's config/deploy.yml and Ansible's ansible.cfg are.

Found in the working directory or the nearest parent that has one (the walk stops at the
filesystem root or a folder it cannot read), or named with `--project FILE` or
$ROLLOUT_PROJECT. Read like every file rollout reads: a regular file, bounded, line numbers
in every error. Paths in it are relative to its own folder. Its values are data: a default
becomes an option's value, never an option or shell text.

Which inventory and playbook a command uses, first found wins: the command line, the
environment ($ROLLOUT_HOSTS, $ROLLOUT_PLAYBOOK), the project file, the inventory's own
`playbook`, then today's defaults. `Chosen` carries where each came from, for the line
every command prints.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from rollout.errors import ConfigError, Location

from .yamlfile import YamlDoc, load_yaml, to_plain, validate

PROJECT_FILE = "rollout.yaml"
PROJECT_ENV = "ROLLOUT_PROJECT"
PLAYBOOK_ENV = "ROLLOUT_PLAYBOOK"
HOSTS_ENV = "ROLLOUT_HOSTS"
MAX_PROJECT_BYTES = 256 * 1024


class Chosen(str):
    """A path (or vastai:LABEL) that remembers where it was chosen: `--hosts`,
    `ROLLOUT_HOSTS`, `rollout.yaml:3`, ..."""

    source: str

    def __new__(cls, value: str, source: str) -> Chosen:
        made = super().__new__(cls, value)
        made.source = source
        return made


def source_of(value: str | os.PathLike[str], given: str) -> str:
    """Where `value` came from: its own record, else `given` (a plain string's source)."""
    return getattr(value, "source", given)


class ProjectSpec(BaseModel):
    """A project file (rollout.yaml)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    inventory: str | None = Field(
        default=None,
        description="The inventory (fleet.yaml, an Ansible inventory, or vastai:LABEL), "
        "relative to this file; below --hosts and $ROLLOUT_HOSTS.",
    )
    playbook: str | None = Field(
        default=None,
        description="The playbook, relative to this file; below --playbook and "
        "$ROLLOUT_PLAYBOOK, above the inventory's own `playbook`.",
    )
    defaults: dict[str, dict[str, Any]] = Field(
        default_factory=dict,
        description="Per command, its options' defaults (`rollout: {limit: canary}`); "
        "the command line wins.",
    )


@dataclass(frozen=True)
class Project:
    """A project file read and checked: paths resolved from its folder."""

    doc: YamlDoc
    spec: ProjectSpec
    defaults: dict[str, dict[str, Any]] = field(default_factory=dict)

    @property
    def name(self) -> str:
        return str(self.doc.path)

    def where(self, *key: str) -> str:
        """`rollout.yaml:3` for a top-level key (as the playbook line prints it)."""
        return f"{self.doc.path}:{self.doc.line_of(key)}"

    def location(self, *key: str) -> Location:
        return self.doc.location(key)

    def path(self, key: str) -> Chosen | None:
        value = getattr(self.spec, key)
        if value is None:
            return None
        if value.startswith("vastai:"):
            return Chosen(value, self.where(key))
        path = Path(value).expanduser()
        full = path if path.is_absolute() else Path(os.path.normpath(self.doc.base_dir / path))
        return Chosen(str(full), self.where(key))


def find_project(start: Path, explicit: str | None = None) -> Path | None:
    """The project file named by `explicit`, else $ROLLOUT_PROJECT, else rollout.yaml in
    `start` or its nearest parent; None when there is none."""
    named = explicit or os.environ.get(PROJECT_ENV)
    if named:
        return Path(named)
    folder = start.absolute()
    while True:
        candidate = folder / PROJECT_FILE
        try:
            if candidate.exists():
                return candidate
        except OSError:  # a folder we cannot read ends the walk
            return None
        if folder.parent == folder or not os.access(folder.parent, os.R_OK | os.X_OK):
            return None
        folder = folder.parent


def load_project(path: Path) -> Project:
    """Read and check a project file. ConfigError naming file, line and key otherwise."""
    doc = load_yaml(path, "project")
    data = to_plain(doc.root)
    if not isinstance(data, dict):
        raise ConfigError("a project file is a mapping (inventory, playbook, defaults)",
                          Location(str(path), 1))
    spec = validate(ProjectSpec, data, doc)
    for key in ("inventory", "playbook"):
        value = getattr(spec, key)
        if value is not None and (not value.strip() or "\x00" in value or "\n" in value):
            raise ConfigError(f"{key} must be a path", doc.location((key,)))
    return Project(doc, spec, spec.defaults)


def choose(given: str | None, env: str, project: Project | None, key: str,
           flag: str) -> Chosen | None:
    """The command line's value, else the environment's, else the project file's."""
    if given:
        return Chosen(given, flag)
    if os.environ.get(env):
        return Chosen(os.environ[env], env)
    return project.path(key) if project is not None else None
