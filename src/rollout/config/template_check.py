"""Load-time checks of templates: syntax, and names that would be undefined at run time.

Runtime templates (commands, `when`, the daemon config template file) are rendered only
while a host rolls; a mistake found then would leave a host half done. So they are
parsed at load, and every name they use must be one the run will define.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any, Literal

from jinja2 import TemplateError, meta, nodes

from rollout.errors import ConfigError, Location

from .render import ENV, raw_word, strip_braces, template_error
from .shellwords import ShellSyntaxError, Word, split_words

Kind = Literal["template", "expression", "shell"]


def _parse(text: str, kind: Kind) -> list[nodes.Template]:
    """The Jinja2 trees of a runtime template (one per templated word of a command)."""
    if kind == "expression":
        ENV.compile_expression(strip_braces(text))
        return [ENV.parse("{{ " + strip_braces(text) + " }}")]
    if kind == "shell":
        words = [w for w in split_words(text) if isinstance(w, Word) and w.has_tag]
        for word in words:
            raw_word(word)
        return [ENV.parse(w.template) for w in words]
    return [ENV.parse(text)]


def check_syntax(text: str, where: Location | None, kind: Kind) -> None:
    """Parse a runtime template now so that mistakes show at load."""
    try:
        _parse(text, kind)
    except (TemplateError, ShellSyntaxError) as exc:
        raise template_error(exc, where) from exc


def _undeclared(tree: nodes.Template) -> set[str]:
    return set(meta.find_undeclared_variables(tree)) - set(ENV.globals)


def _first_line(trees: Iterable[nodes.Template], name: str) -> int | None:
    for tree in trees:
        for node in tree.find_all(nodes.Name):
            if node.name == name:
                return int(node.lineno)
    return None


def check_names(
    text: str, kind: Kind, known: Iterable[str], where: Location, in_file: bool = False
) -> None:
    """Every name the template uses is in `known`; else ConfigError at `where` (for a
    template file, at the line of the name in that file)."""
    trees = _parse(text, kind)
    missing = sorted(set().union(*(_undeclared(t) for t in trees)) - set(known))
    if not missing:
        return
    line = _first_line(trees, missing[0]) if in_file else where.line
    raise ConfigError(
        f"runtime template uses undefined name(s) {', '.join(missing)}; "
        "define them in vars, the inventory or --set",
        Location(where.file, line, where.key),
    )


def names_used(text: str, expression: bool = False) -> set[str]:
    """Every name a template (a `when` expression if `expression`) refers to; empty when
    it does not parse."""
    try:
        return _undeclared(ENV.parse("{{ " + strip_braces(text) + " }}" if expression else text))
    except TemplateError:
        return set()


def strings_in(node: Any) -> Iterator[str]:
    """Every string at any depth of parsed YAML (keys excluded)."""
    if isinstance(node, str):
        yield node
    elif isinstance(node, dict):
        for value in node.values():
            yield from strings_in(value)
    elif isinstance(node, list):
        for value in node:
            yield from strings_in(value)
