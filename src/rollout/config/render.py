"""Jinja2 templating of parsed YAML values, in ONE sandboxed environment.

Two moments, one set of rules (StrictUndefined: a missing name is an error), and every
template is rendered exactly once; a rendered value is data and never rendered again:

* load time: every string of the playbook is rendered with its variables
  (`render_tree`). A string that is exactly one `{{ expression }}` keeps the
  expression's type, so `pool: "{{ pool }}"` with `--set pool=64` gives the int 64.
* run time: the engine renders the "runtime templates" (`validate.command` and a
  validate step's `params.command`, the daemon config template file, the steps' `when`
  conditions) once the names only known while running (`host`, `release_dir`, ...)
  exist: `render_shell`, `render_runtime`, `evaluate_condition`. They are checked at
  load (`template_check`).

Shell commands are rendered word by word (`shellwords`): a word holding a placeholder
becomes one quoted word whatever quotes surround it; `{{ value | raw }}` opts out. That
protects one level of parsing: a placeholder in a word that another interpreter parses
again (`sh -c '...'`, `eval`, `python3 -c`, here-documents, `$(...)`) is refused at load
(`nested`). A command may also be an argv list (each item one argument, no shell), and
values may reach it through its `env:` mapping (`render_command`).
"""

from __future__ import annotations

import functools
import re
import shlex
from collections.abc import Callable, Mapping
from typing import Any

from jinja2 import StrictUndefined, Template, TemplateError, Undefined, UndefinedError, nodes
from jinja2.sandbox import ImmutableSandboxedEnvironment

from rollout.errors import ConfigError, Location
from rollout.secrets import secret

from .shellwords import ShellSyntaxError, Word, split_words
from .tomlkey import toml_key
from .yamlfile import KeyPath, to_plain


class ShellRaw(str):
    """Text a shell template inserts as it is: `{{ value | raw }}`. Use with care."""


ENV = ImmutableSandboxedEnvironment(
    undefined=StrictUndefined, keep_trailing_newline=True, autoescape=False
)
ENV.globals["secret"] = secret
ENV.filters["raw"] = ShellRaw
ENV.filters["option"] = lambda value: value  # declares an argv item that may be an option
ENV.filters["toml_key"] = toml_key  # a key or table name written into a TOML file
_TEMPLATE_MARK = re.compile(r"{{|{%|{#")
_ONE_EXPRESSION = re.compile(r"^{{((?:(?!}}|{{).)*)}}$", re.DOTALL)


def is_template(text: str) -> bool:
    return _TEMPLATE_MARK.search(text) is not None


def template_error(exc: Exception, where: Location | None, prefix: str = "") -> ConfigError:
    kind = "template error" if isinstance(exc, TemplateError) else type(exc).__name__
    detail = exc.message if isinstance(exc, TemplateError) else str(exc)
    err = ConfigError(f"{prefix}{kind}: {detail}", where)
    err.__cause__ = exc
    return err


@functools.lru_cache(maxsize=1024)
def _template(source: str) -> Template:
    """A compiled template: the same text compiles once per process, not once per host
    (compiling is most of what rendering costs). Rendering a compiled template is
    thread-safe; the sandbox's rules hold at render time as they do at compile time."""
    return ENV.from_string(source)


@functools.lru_cache(maxsize=1024)
def _expression(expression: str) -> Any:
    return ENV.compile_expression(expression, undefined_to_none=False)


def expression_value(expression: str, context: Mapping[str, Any]) -> Any:
    """The value of a Jinja2 expression; an undefined name raises."""
    value = _expression(expression)(**context)
    if isinstance(value, Undefined):
        str(value)  # StrictUndefined raises here, naming the missing variable
    return value


def render_value(text: str, context: Mapping[str, Any]) -> Any:
    """Render one string at load time (typed when it is a single expression)."""
    if not is_template(text):
        return text
    single = _ONE_EXPRESSION.match(text)
    if single is not None:
        return expression_value(single.group(1), context)
    return _template(text).render(context)


def render_runtime(template: str, context: Mapping[str, Any], where: Location | None = None) -> str:
    """Render a runtime template (the daemon config template) to text.

    A missing name or a bad template raises ConfigError located at `where`
    (use `Playbook.location(...)` for the playbook line).
    """
    try:
        return _template(template).render(context)
    except Exception as exc:  # any error raised inside a user's template is theirs
        raise template_error(exc, where) from exc


def raw_word(word: Word) -> bool:
    """Whether a word's placeholders are `| raw` (all of them; a mix is an error)."""
    outputs = [
        node
        for output in ENV.parse(word.template).find_all(nodes.Output)
        for node in output.nodes
        if not isinstance(node, nodes.TemplateData)
    ]
    raw = [n for n in outputs if isinstance(n, nodes.Filter) and n.name == "raw"]
    if raw and len(raw) != len(outputs):
        raise ShellSyntaxError(
            f"{word.source!r}: a word with `| raw` takes only raw values; "
            "put the others in their own word"
        )
    return bool(raw)


@functools.lru_cache(maxsize=1024)
def _shell_parts(template: str) -> tuple[tuple[str, bool | None], ...]:
    """The command template split into words once per process, not once per host and
    render: (text, raw) pairs, `raw` None for text kept as written (blanks, operators, a
    word without a placeholder), True for a `| raw` word (rendered as it is), False for a
    word rendered and then quoted as one word."""
    parts: list[tuple[str, bool | None]] = []
    for piece in split_words(template):
        if isinstance(piece, str) or not piece.has_tag:
            parts.append((piece if isinstance(piece, str) else piece.source, None))
        elif raw_word(piece):
            parts.append((piece.source, True))
        else:
            parts.append((piece.template, False))
    return tuple(parts)


def _render_part(text: str, raw: bool, context: Mapping[str, Any]) -> str:
    rendered = _template(text).render(context)
    return rendered if raw else shlex.quote(rendered)


def render_shell(
    template: str, context: Mapping[str, Any], where: Location | None = None
) -> str:
    """Render a shell command template word by word: each word with a placeholder becomes
    one quoted word (`'{{ v }}'` and `"{{ v }}"` too), so a value like `$(reboot)` or
    `x; touch /tmp/pwned` stays inert. `{{ value | raw }}` opts out."""
    try:
        return "".join(
            text if raw is None else _render_part(text, raw, context)
            for text, raw in _shell_parts(template)
        )
    except Exception as exc:
        raise template_error(exc, where) from exc


Command = str | list[str]
"""A user command: a shell command line (split into words), or an argv list (no shell)."""


def render_command(
    command: Command,
    env: Mapping[str, str],
    context: Mapping[str, Any],
    where: Location | None = None,
) -> str:
    """The command line to run: `export NAME='value'; ` for each `env` entry (its value a
    template, rendered and quoted: the command reads it as "$NAME", never as text of its
    own), then the command (an argv list becomes one quoted word per item). An argv item or
    env value that a placeholder makes start with `-` is refused unless it is declared
    (`{{ v | option }}`): a value is never an option by accident."""
    if isinstance(command, str):
        line = render_shell(command, context, where)
    else:
        line = shlex.join(render_argument(item, context, where) for item in command)
    exports = "".join(
        f"export {name}={shlex.quote(render_argument(value, context, where))}; "
        for name, value in env.items()
    )
    return exports + line


def render_argument(template: str, context: Mapping[str, Any], where: Location | None) -> str:
    """One argv item or env value, refused when a value made it an option by accident."""
    text = render_runtime(template, context, where)
    problem = option_problem(template, text)
    if problem is not None:
        raise ConfigError(problem, where)
    return text


def option_problem(template: str, text: str) -> str | None:
    """Why `text`, the rendering of `template`, may not be used: it starts with `-` that a
    value put there (not the playbook's own text) and the template declares no option."""
    if not text.startswith("-") or template.startswith("-") or declares_option(template):
        return None
    return (
        f"{template!r} gave {text[:60]!r}, which starts with '-': a program would read it as "
        "an option. A value is never an option by accident: if this argument takes an "
        "option, declare it in the playbook ('{{ v | option }}'); else give the value "
        "joined to its flag (`--flag={{ v }}`)"
    )


@functools.lru_cache(maxsize=1024)
def declares_option(template: str) -> bool:
    """Whether the template starts with a placeholder filtered by `option`."""
    try:
        body = ENV.parse(template).body
    except TemplateError:
        return False
    first = body[0] if body else None
    if not isinstance(first, nodes.Output) or not first.nodes:
        return False
    node: nodes.Expr | None = first.nodes[0]
    while isinstance(node, nodes.Filter):
        if node.name == "option":
            return True
        node = node.node
    return False


TRUE_WORDS = frozenset({"true", "yes", "on", "1"})
FALSE_WORDS = frozenset({"false", "no", "off", "0"})
"""What a `when` may render to as text (case-insensitive): `--set c=no` is false."""


def as_condition(value: Any) -> bool:
    """A `when` value as a bool: a bool, 0 or 1, or one of TRUE_WORDS/FALSE_WORDS; anything
    else (another string, a number, a list, None) is refused, naming it."""
    if isinstance(value, bool):
        return value
    word = str(value).strip().lower() if isinstance(value, str | int) else None
    if word in TRUE_WORDS:
        return True
    if word in FALSE_WORDS:
        return False
    shown = repr(value)[:80]
    raise ValueError(
        f"`when` gave {shown}: it must be a boolean (true/false, yes/no, on/off, 1/0)"
    )


def evaluate_condition(
    condition: bool | str, context: Mapping[str, Any], where: Location | None = None
) -> bool:
    """Evaluate a step's `when`: a bool, or a Jinja2 expression (`version != 'v1'`,
    with or without surrounding `{{ }}`) whose value is a boolean (`as_condition`)."""
    if isinstance(condition, bool):
        return condition
    try:
        return as_condition(expression_value(strip_braces(condition), context))
    except Exception as exc:
        raise template_error(exc, where) from exc


def strip_braces(expression: str) -> str:
    text = expression.strip()
    if text.startswith("{{") and text.endswith("}}"):
        return text[2:-2]
    return text


RuntimeKind = Callable[[KeyPath], bool]
"""Says whether the string at a path is a runtime template (left for the engine)."""


def render_tree(
    node: Any,
    context: Mapping[str, Any],
    locate: Callable[[KeyPath], Location],
    runtime: RuntimeKind = lambda path: False,
    path: KeyPath = (),
) -> Any:
    """Render every string under `node` (round-trip YAML) and return plain data.

    Strings that `runtime` marks are kept as they are: rendered once, at run time.
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
    if runtime(path):
        return str(node)  # checked by template_check, rendered by the engine
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
