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


GUARD_FILTERS = frozenset({"default", "d"})
"""Filters that give a value for an undefined name: `{{ x | default(1) }}`."""


def _each(node: nodes.Node, kind: type[nodes.Node]) -> Iterator[Any]:
    """`node` itself when of this kind, then every such node under it."""
    if isinstance(node, kind):
        yield node
    yield from node.find_all(kind)


def _tested(node: nodes.Node, how: str = "defined") -> set[str]:
    """Names `node` tests with `is defined` (or `how`): a branch it guards may use them."""
    return {
        test.node.name
        for test in _each(node, nodes.Test)
        if test.name == how and isinstance(test.node, nodes.Name)
    }


def _guarded(tree: nodes.Template) -> set[int]:
    """The Name nodes (by id) that cannot fail when undefined: `x | default(..)`,
    `x is defined`, `x is undefined`, and uses in a branch under `x is defined`
    (`{% if x is defined %}`, `a if x is defined else b`, `x is defined and x`,
    `x is undefined or x`)."""
    out: set[int] = set()
    for node in tree.find_all((nodes.Filter, nodes.Test)):
        guards = GUARD_FILTERS if isinstance(node, nodes.Filter) else {"defined", "undefined"}
        if node.name in guards and isinstance(node.node, nodes.Name):
            out.add(id(node.node))
    branches: list[tuple[nodes.Node, list[nodes.Node]]] = []
    for cond in tree.find_all(nodes.If):
        branches.append((cond.test, list(cond.body)))
    for expr in tree.find_all(nodes.CondExpr):
        branches.append((expr.test, [expr.expr1]))
    for both in tree.find_all(nodes.And):
        branches.append((both.left, [both.right]))
    for test, body in branches:
        names = _tested(test)
        out |= {id(n) for part in body for n in _each(part, nodes.Name) if n.name in names}
    for either in tree.find_all(nodes.Or):
        names = _tested(either.left, "undefined")
        out |= {id(n) for n in _each(either.right, nodes.Name) if n.name in names}
    return out


def _undeclared(tree: nodes.Template) -> set[str]:
    """Names the template needs from its context: those used without a guard
    (`default`, `is defined`)."""
    undeclared = set(meta.find_undeclared_variables(tree)) - set(ENV.globals)
    guarded = _guarded(tree)
    unguarded = {
        n.name for n in tree.find_all(nodes.Name) if n.ctx == "load" and id(n) not in guarded
    }
    return undeclared & unguarded


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


Path = tuple[str | int, ...]
"""A name and the constant attributes or keys read from it: `daemon.listen` is
("daemon", "listen")."""


def paths_used(text: str, kind: Kind) -> set[Path]:
    """Every name a runtime template reads from its context, guarded or not (`x | default`
    too), with the constant attributes read from it; empty when it does not parse."""
    try:
        trees = _parse(text, kind)
    except (TemplateError, ShellSyntaxError):
        return set()
    found: set[Path] = set()
    for tree in trees:
        context = set(meta.find_undeclared_variables(tree)) - set(ENV.globals)
        found |= {p for p in _paths(tree) if p[0] in context}
    return found


def _paths(node: nodes.Node) -> Iterator[Path]:
    chain = _chain(node)
    if chain is not None:
        yield chain
        return
    for child in node.iter_child_nodes():
        yield from _paths(child)


def _chain(node: nodes.Node) -> Path | None:
    """`a.b['c']` as ("a", "b", "c"); None for anything else (a call, a computed key)."""
    if isinstance(node, nodes.Name) and node.ctx == "load":
        return (node.name,)
    if isinstance(node, nodes.Getattr):
        base = _chain(node.node)
        return None if base is None else (*base, node.attr)
    if isinstance(node, nodes.Getitem) and isinstance(node.arg, nodes.Const):
        key = node.arg.value
        base = _chain(node.node)
        return None if base is None or not isinstance(key, str | int) else (*base, key)
    return None


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


def secret_names(text: str, kind: Kind) -> set[str]:
    """The NAMEs of `secret('NAME')` calls (a constant NAME) in a runtime template."""
    try:
        trees = _parse(text, kind)
    except (TemplateError, ShellSyntaxError):
        return set()
    return {
        str(call.args[0].value)
        for tree in trees
        for call in tree.find_all(nodes.Call)
        if isinstance(call.node, nodes.Name) and call.node.name == "secret"
        and call.args and isinstance(call.args[0], nodes.Const)
        and isinstance(call.args[0].value, str)
    }
