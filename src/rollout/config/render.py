"""Jinja2 templating of parsed YAML values.

Two moments, one set of rules (StrictUndefined: a missing name is an error):

* load time: every string of the playbook is rendered with its variables
  (`render_tree`). A string that is exactly one `{{ expression }}` keeps the
  expression's type, so `pool: "{{ pool }}"` with `--set pool=64` gives the int 64.
* run time: the engine renders the "runtime templates" (`validate.command`, the
  daemon config template file, the steps' `when` conditions) once the names only
  known while running (`host`, `release_dir`, ...) exist: `render_runtime`,
  `evaluate_condition`.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Callable, Iterable, Mapping
from itertools import chain, islice
from typing import Any

from jinja2 import Environment, StrictUndefined, TemplateError, Undefined, UndefinedError
from jinja2.nativetypes import NativeEnvironment, NativeTemplate

from rollout.errors import ConfigError, Location
from rollout.secrets import secret

from .yamlfile import KeyPath, to_plain


def _native_concat(values: Iterable[Any]) -> Any:
    """One expression keeps its type; anything else joins as text."""
    head = list(islice(values, 2))
    if len(head) == 1 and not isinstance(head[0], Undefined | str):
        return head[0]
    return "".join(str(v) for v in chain(head, values))


class _NativeEnvironment(NativeEnvironment):
    concat = staticmethod(_native_concat)


class _NativeTemplate(NativeTemplate):
    environment_class = _NativeEnvironment


_NativeEnvironment.template_class = _NativeTemplate


class ShellRaw(str):
    """Text a shell template inserts as it is: `{{ value | raw }}`. Use with care."""


def _shell_quote(value: Any) -> Any:
    """Every value inserted into a shell command is one quoted word, unless marked raw."""
    if isinstance(value, ShellRaw | Undefined):
        return value
    return shlex.quote(str(value))


def _environment(cls: type[Environment], **options: Any) -> Environment:
    env = cls(undefined=StrictUndefined, keep_trailing_newline=True, autoescape=False, **options)
    env.globals["secret"] = secret
    env.filters["raw"] = ShellRaw
    return env


_NATIVE = _environment(_NativeEnvironment)
_TEXT = _environment(Environment)
_SHELL = _environment(Environment, finalize=_shell_quote)
_TEMPLATE_MARK = re.compile(r"{{|{%|{#")


def is_template(text: str) -> bool:
    return _TEMPLATE_MARK.search(text) is not None


def template_error(exc: Exception, where: Location | None, prefix: str = "") -> ConfigError:
    kind = "template error" if isinstance(exc, TemplateError) else type(exc).__name__
    detail = exc.message if isinstance(exc, TemplateError) else str(exc)
    err = ConfigError(f"{prefix}{kind}: {detail}", where)
    err.__cause__ = exc
    return err


def render_value(text: str, context: Mapping[str, Any]) -> Any:
    """Render one string at load time (typed when it is a single expression)."""
    if not is_template(text):
        return text
    return _NATIVE.from_string(text).render(context)


def render_runtime(template: str, context: Mapping[str, Any], where: Location | None = None) -> str:
    """Render a runtime template (validate.command, the daemon config template) to text.

    A missing name or a bad template raises ConfigError located at `where`
    (use `Playbook.location(...)` for the playbook line).
    """
    try:
        return _TEXT.from_string(template).render(context)
    except Exception as exc:  # any error raised inside a user's template is theirs
        raise template_error(exc, where) from exc


def render_shell(
    template: str, context: Mapping[str, Any], where: Location | None = None
) -> str:
    """Render a shell command template: each `{{ value }}` becomes one quoted word, so an
    inventory value like `x; touch /tmp/pwned` stays inert. `{{ value | raw }}` opts out."""
    try:
        return _SHELL.from_string(template).render(context)
    except Exception as exc:
        raise template_error(exc, where) from exc


def evaluate_condition(
    condition: bool | str, context: Mapping[str, Any], where: Location | None = None
) -> bool:
    """Evaluate a step's `when`: a bool, or a Jinja2 expression (`version != 'v1'`,
    with or without surrounding `{{ }}`)."""
    if isinstance(condition, bool):
        return condition
    try:
        value = _TEXT.compile_expression(_strip_braces(condition), undefined_to_none=False)(
            **context
        )
        if isinstance(value, Undefined):
            str(value)  # StrictUndefined raises here, naming the missing variable
        return bool(value)
    except Exception as exc:
        raise template_error(exc, where) from exc


def check_syntax(text: str, where: Location | None, expression: bool = False) -> None:
    """Parse a runtime template (or `when` expression) now so that mistakes show at load."""
    try:
        if expression:
            _TEXT.compile_expression(_strip_braces(text))
        else:
            _TEXT.parse(text)
    except TemplateError as exc:
        raise template_error(exc, where) from exc


def _strip_braces(expression: str) -> str:
    text = expression.strip()
    if text.startswith("{{") and text.endswith("}}"):
        return text[2:-2]
    return text


RuntimeKind = Callable[[KeyPath], str | None]
"""Says whether the string at a path is a runtime "template", an "expression", or None."""


def render_tree(
    node: Any,
    context: Mapping[str, Any],
    locate: Callable[[KeyPath], Location],
    runtime: RuntimeKind = lambda path: None,
    path: KeyPath = (),
) -> Any:
    """Render every string under `node` (round-trip YAML) and return plain data.

    Strings that `runtime` marks are kept as they are after a syntax check.
    Errors raise ConfigError at the string's line and key.
    """
    if isinstance(node, Mapping):
        return {
            to_plain(k): render_tree(v, context, locate, runtime, (*path, to_plain(k)))
            for k, v in node.items()
        }
    if isinstance(node, list):
        return [render_tree(v, context, locate, runtime, (*path, i)) for i, v in enumerate(node)]
    if not isinstance(node, str):
        return to_plain(node)
    kind = runtime(path)
    if kind is not None:
        check_syntax(node, locate(path), expression=kind == "expression")
        return str(node)
    try:
        return render_value(str(node), context)
    except Exception as exc:
        raise template_error(exc, locate(path)) from exc


def resolve_vars(
    templated: Mapping[str, Any],
    fixed: Mapping[str, Any],
    locate: Callable[[KeyPath], Location],
) -> dict[str, Any]:
    """Render variables that may refer to each other, in any order.

    `templated` are the playbook's own vars (round-trip nodes under the `vars` key);
    `fixed` (host vars, then --set overrides) win over them and are not templated.
    """
    done = dict(fixed)
    pending = {k: v for k, v in templated.items() if k not in fixed}
    while pending:
        before = len(pending)
        deferred: list[ConfigError] = []
        for name, node in list(pending.items()):
            try:
                done[name] = render_tree(node, done, locate, path=("vars", name))
            except ConfigError as exc:
                if not isinstance(exc.__cause__, UndefinedError):
                    raise
                deferred.append(exc)
                continue
            del pending[name]
        if deferred and len(pending) == before:
            raise deferred[0]  # no progress: a name that is undefined, or a cycle
    return done
