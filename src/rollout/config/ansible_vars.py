"""`group_vars/` and `host_vars/` beside an Ansible inventory file, found as ansible-core's
host_group_vars plugin finds them (DataLoader.find_vars_files): for a group or host NAME,
the first of `NAME`, `NAME.yml`, `NAME.yaml`, `NAME.json` that exists; when that is a
folder, every file in it and its sub-folders (lexical order; hidden files, `~` backups and
other extensions skipped), later files over earlier ones. Each file is YAML (JSON is YAML)
holding a mapping of vars; an empty file sets none. Values are data, as in the inventory.
"""

from __future__ import annotations

import os
from pathlib import Path

from rollout.errors import ConfigError, Location
from rollout.readfile import UnreadableFile, open_regular

from .ansible import Parsed, Value
from .ansible_detect import YAML_SUFFIXES, looks_like_ansible
from .ansible_ini import read_ini
from .ansible_yaml import parse_yaml, vars_file
from .yamlfile import load_yaml

EXTENSIONS = (".yml", ".yaml", ".json")
VAULT_HEADER = "$ANSIBLE_VAULT;"


def with_vars_dirs(parsed: Parsed) -> Parsed:
    """`parsed`, its group_files and host_files filled from the folders beside it."""
    base = Path(os.path.realpath(parsed.file.absolute().parent))
    for kind, names, into in (("group_vars", parsed.groups, parsed.group_files),
                              ("host_vars", parsed.hosts, parsed.host_files)):  # fmt: skip
        folder = base / kind
        if not folder.is_dir():
            continue
        for name in names:
            try:
                found = _vars_of(parsed, folder, name)
            except UnreadableFile as e:  # fails the hosts this file gives vars to, no others
                parsed.unreadable[f"{kind}/{name}"] = str(e)
                continue
            if found:
                into[name] = found
    return parsed


def find_vars_files(folder: Path, name: str) -> list[Path]:
    """The files that hold NAME's vars in `folder`, in the order they are merged."""
    for candidate in (name, *(name + ext for ext in EXTENSIONS)):
        path = folder / candidate
        if path.is_dir():
            return _files_in(path)
        if path.exists():
            if not path.is_file():  # a fifo or a device would block the read
                raise UnreadableFile(path, "vars file", "is not a file nor a folder")
            return [path]
    return []


def _files_in(folder: Path, seen: frozenset[str] = frozenset()) -> list[Path]:
    real = os.path.realpath(folder)
    if real in seen:  # a symlink back up the tree: Ansible would recurse until it fails
        raise ConfigError("a folder that contains itself (a symlink loop)",
                          Location(str(folder)))  # fmt: skip
    found = []
    for entry in sorted(os.listdir(folder)):
        if entry.startswith(".") or entry.endswith("~"):
            continue
        path, ext = folder / entry, os.path.splitext(entry)[1]
        if path.is_dir() and not ext:
            found.extend(_files_in(path, seen | {real}))
        elif path.is_file() and (not ext or ext in EXTENSIONS):
            found.append(path)
    return found


def _vars_of(parsed: Parsed, folder: Path, name: str) -> dict[str, Value]:
    if name in (".", "..") or "/" in name or name.startswith(os.sep):
        raise ConfigError(f"{name!r} cannot name a file in {folder.name}/",
                          Location(str(parsed.file), None, name))  # fmt: skip
    merged: dict[str, Value] = {}
    for path in find_vars_files(folder, name):
        merged.update(_read(path, folder.parent))
    return merged


def _read(path: Path, inventory_folder: Path) -> dict[str, Value]:
    """The vars of one file, which (links followed) must lie in the inventory's folder."""
    with open_regular(path, "vars file", inside=inventory_folder) as f:
        head = f.read(len(VAULT_HEADER)).decode("utf-8", errors="replace")
    if head == VAULT_HEADER:
        raise ConfigError("Vault-encrypted vars files are not supported: give the plain "
                          "values", Location(str(path), 1))  # fmt: skip
    doc = load_yaml(path, "vars", quotes=True, inside=inventory_folder)
    return vars_file(doc)


def read_ansible(path: Path) -> Parsed | None:
    """The Ansible inventory at `path` with its vars folders, before validation; None when
    the file is a fleet.yaml (rollout's own format)."""
    if path.suffix not in YAML_SUFFIXES:
        return with_vars_dirs(read_ini(path))
    doc = load_yaml(path, "inventory")
    return with_vars_dirs(parse_yaml(doc)) if looks_like_ansible(doc.root) else None
