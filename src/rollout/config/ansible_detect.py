"""Which reader an inventory file needs: Ansible's (INI, or YAML of groups) or fleet.yaml's.

Apart from the Ansible readers (ansible.py, ansible_ini.py, ansible_yaml.py, ansible_vars.py)
so that a fleet.yaml inventory is read without loading them (start-up time)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

YAML_SUFFIXES = (".yaml", ".yml")
"""An inventory named otherwise is INI, as Ansible decides."""

GROUP_KEYS = {"hosts", "vars", "children"}
"""The keys of a group in Ansible's YAML inventory."""


def looks_like_ansible(root: Any) -> bool:
    """An Ansible YAML inventory: a mapping of groups (`all`, usually), each null or
    holding only hosts/vars/children (fleet.yaml has `hosts:` as a list and `defaults:`),
    or an inventory plugin's config (refused later, with its line)."""
    if isinstance(root, Mapping) and ("all" in root or "plugin" in root):
        return True
    return (
        isinstance(root, Mapping)
        and bool(root)
        and all(g is None or (isinstance(g, Mapping) and set(g) <= GROUP_KEYS)
                for g in root.values())  # fmt: skip
        and any(isinstance(g, Mapping) and g for g in root.values())
    )
