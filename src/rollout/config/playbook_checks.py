"""What a loaded playbook must satisfy before anything runs: the files it names exist,
its runtime templates parse and use only names the run defines, and every --set value
is used by some template (else a warning)."""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any

from rollout.errors import ConfigError, Location, UserError
from rollout.readfile import UnreadableFile, read_text
from rollout.secrets import secret

from .nested import nested_placeholder
from .playbook_model import Playbook
from .render import as_condition, expression_value, option_problem, render_runtime, strip_braces
from .shell_rule import Origins, refusal
from .shellwords import ShellSyntaxError
from .template_check import (
    Kind,
    check_names,
    check_syntax,
    names_used,
    secret_names,
    strings_in,
)
from .yamlfile import KeyPath, YamlDoc, to_plain

CONFIG_TEMPLATE_NAMES = frozenset({"total_budget", "extra_config"})
"""Names the config step adds to the context of the daemon config template."""
CODE_VARS = frozenset({"version"})
"""Variables rollout itself reads (the release's version), used even with no template."""


def commands(playbook: Playbook) -> Iterator[tuple[Any, KeyPath]]:
    """Each user command of the playbook (a string or an argv list) and its key path."""
    yield playbook.validation.command, ("validate", "command")
    for key in ("cordon", "uncordon"):
        work_command = getattr(playbook.work, key)
        if work_command is not None:
            yield work_command, ("work", key)
    for index, step in enumerate(playbook.steps):
        command = step.params.get("command")
        if isinstance(command, str | list):
            yield command, ("steps", index, "params", "command")


def runtime_templates(playbook: Playbook) -> Iterator[tuple[str, Kind, KeyPath]]:
    """Each runtime template of the playbook: its text, its kind and its key path."""
    for command, path in commands(playbook):
        if isinstance(command, str):
            yield command, "shell", path
        else:
            for item, text in enumerate(command):
                yield str(text), "template", (*path, item)
    for name, value in playbook.validation.env.items():
        yield value, "template", ("validate", "env", name)
    for index, step in enumerate(playbook.steps):
        if isinstance(step.when, str):
            yield step.when, "expression", ("steps", index, "when")


def check_when_values(playbook: Playbook, doc: YamlDoc) -> None:
    """A `when` whose value is known at load (vars, --set, the sections) is a boolean: a
    string like 'maybe' is refused now (one known only at run time fails its step then)."""
    context = playbook.template_context()
    for index, step in enumerate(playbook.steps):
        if not isinstance(step.when, str):
            continue
        try:
            value = expression_value(strip_braces(step.when), context)
        except Exception:  # noqa: BLE001 - names known only at run time; checked then
            continue
        try:
            as_condition(value)
        except ValueError as exc:
            raise ConfigError(str(exc), doc.location(("steps", index, "when"))) from None


def check_shell_rule(playbook: Playbook, doc: YamlDoc, origins: Origins) -> None:
    """No value from outside the playbook in a shell-string command (`shell_rule`), and
    none inside an argv item that an interpreter named in the list reads as code."""
    for command, path in commands(playbook):
        key = ".".join(str(p) for p in path)
        if isinstance(command, str):
            why = origins.first(command, "shell")
            if why is not None:
                message = refusal(command, key, why, env=path[0] != "work")
                raise ConfigError(message, doc.location(path))
            continue
        found = nested_placeholder(command)
        why = None if found is None else origins.first(found.word, "template")
        if found is not None and why is not None:
            raise ConfigError(f"{found.message()} (the value: {why})", doc.location(path))


def check_options(playbook: Playbook, doc: YamlDoc, origins: Origins) -> None:
    """An argv item or env value whose value is known at load and would start with `-`
    is refused now unless declared (`{{ v | option }}`); the rest when rendered."""
    context = playbook.template_context()
    for text, path in _arguments(playbook):
        try:
            rendered = render_runtime(text, context)
        except ConfigError:
            continue  # it needs a name known only at run time: checked when rendered
        problem = option_problem(text, rendered)
        if problem is not None:
            why = origins.first(text, "template")
            raise ConfigError(problem + (f" (the value: {why})" if why else ""),
                              doc.location(path))


def _arguments(playbook: Playbook) -> Iterator[tuple[str, KeyPath]]:
    """Each argv item and env value of the playbook's commands, with its key path."""
    for command, path in commands(playbook):
        if isinstance(command, list):
            for index, item in enumerate(command):
                yield str(item), (*path, index)
    for name, value in playbook.validation.env.items():
        yield value, ("validate", "env", name)


def nested_advice(playbook: Playbook, doc: YamlDoc) -> list[str]:
    """Advice, not a refusal: a placeholder (the playbook's own value: an outside one is
    refused) in a word that a nested interpreter parses again (`nested`)."""
    advice = []
    for command, path in commands(playbook):
        try:
            found = nested_placeholder(command)
        except ShellSyntaxError:
            continue  # check_syntax names it
        if found is not None:
            advice.append(f"{doc.location(path)}: {found.advice()}")
    return advice


def check_runtime_templates(
    playbook: Playbook, doc: YamlDoc, known: Iterable[str] | None,
    outside: Mapping[str, str] | None = None,
) -> None:
    """Syntax always; names too when `known` (the names of a host's run) is given. The vars
    that `outside` names (what set them: --set, the inventory) are values from outside the
    playbook (`shell_rule`)."""
    for text, kind, path in runtime_templates(playbook):
        check_syntax(text, doc.location(path), kind)
        if known is not None:
            check_names(text, kind, known, doc.location(path))
    origins = Origins(to_plain(doc.root) if isinstance(doc.root, Mapping) else {}, outside or {})
    check_shell_rule(playbook, doc, origins)
    check_options(playbook, doc, origins)
    check_when_values(playbook, doc)
    check_secrets(playbook, doc)
    template = config_template_text(playbook, doc)
    if template is not None:
        where = doc.location(("daemon", "config_template"))
        check_syntax(template, where, "template")
        if known is not None:
            in_file = Location(str(playbook.daemon.config_template))
            check_names(template, "template", {*known, *CONFIG_TEMPLATE_NAMES}, in_file, True)


def check_secrets(playbook: Playbook, doc: YamlDoc) -> None:
    """Each `secret('NAME')` of a runtime template (the config template file too) is read
    now: one that is not set or too weak to mask (`secrets.weakness`) is refused at load,
    not when a host runs it (the config step runs after the old daemon stopped)."""
    templates: list[tuple[str, Kind, KeyPath]] = list(runtime_templates(playbook))
    template = config_template_text(playbook, doc)
    if template is not None:
        templates.append((template, "template", ("daemon", "config_template")))
    for text, kind, path in templates:
        for name in sorted(secret_names(text, kind)):
            try:
                secret(name)
            except UserError as exc:
                raise ConfigError(exc.message, doc.location(path)) from None


def config_template_text(playbook: Playbook, doc: YamlDoc) -> str | None:
    path = playbook.daemon.config_template
    if path is None:
        return None
    try:
        return read_text(path, "config template")
    except UnreadableFile as exc:
        where = doc.location(("daemon", "config_template"))
        raise ConfigError(f"config template {path} {exc.why}", where) from None


def _named_files(playbook: Playbook) -> Iterator[tuple[Path | None, bool, KeyPath]]:
    if playbook.build_section is not None and any(s.kind == "build" for s in playbook.steps):
        yield playbook.build.dockerfile, False, ("build", "dockerfile")
        yield playbook.build.context, True, ("build", "context")
    yield playbook.daemon.config_template, False, ("daemon", "config_template")
    yield playbook.validation.input.source, False, ("validate", "input", "source")


def check_files(playbook: Playbook, doc: YamlDoc) -> None:
    """The local files and folders the playbook names exist (and are of the right kind)."""
    for path, folder, key in _named_files(playbook):
        if path is None:
            continue
        what = "folder" if folder else "file"
        if not path.exists():
            raise ConfigError(f"{what} not found: {path}", doc.location(key))
        if path.is_dir() != folder or not (folder or path.is_file()):
            kind = "" if folder else " (a regular file: not a FIFO, a device or a socket)"
            raise ConfigError(f"not a {what}{kind}: {path}", doc.location(key))


def unused_overrides(
    doc: YamlDoc, overrides: Mapping[str, Any], template: str | None
) -> list[str]:
    """A warning for each --set name that no template (nor rollout itself) uses."""
    used = set(CODE_VARS)
    for text in strings_in(to_plain(doc.root)):
        used |= names_used(text)
    for step in _steps_of(doc.root):
        if isinstance(step, dict) and isinstance(step.get("when"), str):
            used |= names_used(step["when"], expression=True)
    if template is not None:
        used |= names_used(template)
    return [
        f"--set {name}: no template uses {name!r}; check its spelling"
        for name in overrides
        if name not in used
    ]


def _steps_of(root: Any) -> list[Any]:
    steps = to_plain(root).get("steps") if isinstance(root, Mapping) else None
    return steps if isinstance(steps, list) else []


SECRET_NAME = re.compile(r"token|secret|passw|key|credential|auth|api", re.IGNORECASE)
"""A --set name that suggests its value is a secret."""


def looks_secret(name: str, value: Any) -> bool:
    """A name like a secret's with a value long and varied enough to be one (8+ characters,
    at least 6 different ones, no blank)."""
    if not isinstance(value, str) or not SECRET_NAME.search(name):
        return False
    text = value.strip()
    return len(text) >= 8 and len(set(text)) >= 6 and not any(c.isspace() for c in text)


def secret_like_overrides(overrides: Mapping[str, Any]) -> list[str]:
    """A warning for each --set value that looks like a secret: it is in the process list
    and the journal as it is; `{{ secret('NAME') }}` reads it from the environment, masked."""
    return [
        f"--set {name}: this looks like a secret; a --set value shows in the process list "
        f"and the run's journal: put it in an environment variable and use "
        f"{{{{ secret('{name.upper()}') }}}} in the playbook instead"
        for name, value in overrides.items()
        if looks_secret(name, value)
    ]
