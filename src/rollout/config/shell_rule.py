"""Values never become shell text (issue 28), by rule.

A value from outside the playbook (`--set`, the inventory and its group and host vars,
vast.ai, anything a host answered) reaches a command only as an argv item or an
environment variable: a shell-string command that uses one is refused at load, whatever
surrounds it. The playbook's own constants and the paths rollout computes may still be
written into shell strings. Which names are outside is decided here, once: the engine's
names by `RUNTIME_NAMES`, the sections' keys and the playbook's vars by what their
templates use (`Origins`), transitively.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from .sections import code_name
from .shellwords import ShellSyntaxError, split_words
from .template_check import Path, paths_used, strings_in

Origin = Literal["outside", "computed"] | tuple[str, ...]
RUNTIME_NAMES: dict[str, Origin] = {
    "host": "outside",  # the inventory's values: host.vars, host.name, host.address, ...
    "release_id": "computed",  # made by rollout; read back only as one (layout.is_release_id)
    "release_dir": ("release", "root"),  # release.root/releases/<id>: as outside as the root
}
"""The names the engine adds to a runtime template's context: from outside, computed by
rollout (no blank, no leading `-`), or as outside as the playbook key named."""
SECTIONS = frozenset(
    {"rolling", "release", "build", "daemon", "preflight", "params", "validate", "work"}
)
"""The playbook's sections in that context: a key of one is outside where its template in
the playbook uses an outside name (a key the playbook leaves out is rollout's default)."""
_TAGS = re.compile(r"{{.*?}}|{%.*?%}|{#.*?#}", re.DOTALL)
_EXPANDS = re.compile(r"[$`*?\[~]")
_ASSIGNMENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*=")


@dataclass(frozen=True)
class Origins:
    """Where the names of one rendering's templates come from."""

    root: Mapping[str, Any]
    """The playbook as written (plain data)."""
    fixed: Mapping[str, str]
    """Each var set from outside, and what set it (`--set`, `the inventory (host h1)`)."""

    def why(self, path: Path, seen: frozenset[str] = frozenset()) -> str | None:
        """How the value at `path` comes from outside (`daemon.listen <- port <- --set`),
        or None where it is the playbook's own or computed by rollout."""
        name, shown = str(path[0]), dotted(path)
        origin = RUNTIME_NAMES.get(name)
        if origin == "outside":
            return f"{shown} <- the inventory"
        if origin == "computed" or name in seen:
            return None
        if isinstance(origin, tuple):
            inner = self.why(origin, seen | {name})
            return None if inner is None else f"{shown} <- {inner}"
        if name in self.fixed:
            return f"{shown} <- {self.fixed[name]}"
        node = _at(self.root, path) if name in SECTIONS else _var(self.root, name)
        for text in strings_in(node):
            for used in sorted(paths_used(text, "template"), key=str):
                inner = self.why(used, seen | {name})
                if inner is not None:
                    return f"{shown} <- {inner}"
        return None

    def first(self, text: str, kind: Literal["template", "shell"]) -> str | None:
        """The first outside value a runtime template uses (as `why` says it), or None."""
        for path in sorted(paths_used(text, kind), key=str):
            found = self.why(path)
            if found is not None:
                return found
        return None


def dotted(path: Path) -> str:
    return "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in path).lstrip(".")


def _at(node: Any, path: Path) -> Any:
    """The node at `path` of the written playbook: a template string met on the way is the
    value (`drain: "{{ d }}"`); a key left out is None (rollout's default)."""
    for key in path:
        if isinstance(node, str):
            return node
        if isinstance(node, Mapping):
            node = node.get(key)
        elif isinstance(node, list) and isinstance(key, int) and 0 <= key < len(node):
            node = node[key]
        else:
            return None
    return node


def _var(root: Mapping[str, Any], name: str) -> Any:
    playbook_vars = root.get("vars")
    return playbook_vars.get(name) if isinstance(playbook_vars, Mapping) else None


def refusal(command: str, key: str, why: str, env: bool) -> str:
    """The message for a shell string that uses an outside value, with the spellings that
    take it: the command as an argv list (where it is one simple command), env."""
    value = why.split(" <- ")[0]
    text = (
        f"this shell command line uses `{value}`, a value from outside the playbook ({why}): "
        "such a value reaches a command only as an argv item or an environment variable, "
        "never as shell text."
    )
    argv = argv_spelling(command)
    if argv is not None:
        text += f" Write it as an argv list (no shell): {key.rsplit('.', 1)[-1]}: {argv}"
    if env:
        name = re.sub(r"\W+", "_", value).strip("_").upper()
        name = "V" if not name[:1].isalpha() or code_name(name) else name
        text += (" or" if argv is not None else " Pass it in the environment:")
        text += f" env: {{{name}: '{{{{ {value} }}}}'}} and \"${name}\" in its place"
    elif argv is None:
        text += " Write it as an argv list (no shell)"
    return text


def argv_spelling(command: str) -> str | None:
    """The command as an argv list, where it is one simple command whose words the shell
    would not expand; None otherwise."""
    try:
        pieces = split_words(command)
    except ShellSyntaxError:
        return None
    words: list[str] = []
    for piece in pieces:
        if isinstance(piece, str):
            if not piece.isspace():
                return None  # an operator: | ; & < > ( )
            continue
        bare = _TAGS.sub("", piece.source)
        if _EXPANDS.search(bare) or "| raw" in piece.template or (
            not words and _ASSIGNMENT.match(piece.template)
        ):
            return None
        words.append(piece.template)
    return "[" + ", ".join(json.dumps(w) for w in words) + "]" if words else None
