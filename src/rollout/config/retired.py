"""Playbook keys that a release renamed or removed (`sections.RETIRED_KEYS`): a playbook
that still has one loads, with a warning naming what replaced it. A renamed key's value
moves to its new key; a removed key's value is dropped."""

from __future__ import annotations

from collections.abc import Iterable, MutableMapping
from typing import Any

from ruamel.yaml.comments import CommentedMap

from .sections import RETIRED_KEYS, Retired
from .yamlfile import YamlDoc


def _parent(root: Any, keys: list[str], create: bool) -> MutableMapping[Any, Any] | None:
    node = root
    for key in keys:
        if not isinstance(node, MutableMapping):
            return None
        if key not in node and create:
            node[key] = CommentedMap()
        node = node.get(key)
    return node if isinstance(node, MutableMapping) else None


def _retire(doc: YamlDoc, entry: Retired) -> str | None:
    *parents, last = entry.key.split(".")
    holder = _parent(doc.root, parents, create=False)
    if holder is None or last not in holder:
        return None
    where = doc.location(tuple(entry.key.split(".")))
    value = holder.pop(last)
    if entry.replaced_by is None:
        return f"{where}: {entry.key} was removed and is ignored: {entry.why}; delete the key"
    *new_parents, new_last = entry.replaced_by.split(".")
    target = _parent(doc.root, new_parents, create=True)
    if target is None or new_last in target:
        return (f"{where}: {entry.key} was renamed {entry.replaced_by}, which the playbook "
                f"sets too: {entry.key} is ignored ({entry.why})")
    target[new_last] = value
    return (f"{where}: {entry.key} was renamed {entry.replaced_by} ({entry.why}); "
            f"rename the key: the old name will stop loading")


def retire_keys(doc: YamlDoc, table: Iterable[Retired] = RETIRED_KEYS) -> list[str]:
    """Move or drop the retired keys in `doc` (in place, before rendering); a warning
    for each, naming its file:line and what replaced it."""
    return [w for w in (_retire(doc, entry) for entry in table) if w is not None]
