"""What a loaded playbook must satisfy before anything runs: the files it names exist,
its runtime templates parse and use only names the run defines, and every --set value
is used by some template (else a warning)."""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rollout.errors import ConfigError, Location

from .template_check import Kind, check_names, check_syntax, names_used, strings_in
from .yamlfile import KeyPath, YamlDoc, to_plain

if TYPE_CHECKING:
    from .playbook import Playbook

CONFIG_TEMPLATE_NAMES = frozenset({"total_budget", "extra_config"})
"""Names the config step adds to the context of the daemon config template."""
CODE_VARS = frozenset({"version"})
"""Variables rollout itself reads (the release's version), used even with no template."""


def runtime_templates(playbook: Playbook) -> Iterator[tuple[str, Kind, KeyPath]]:
    """Each runtime template of the playbook: its text, its kind and its key path."""
    yield playbook.validation.command, "shell", ("validate", "command")
    for index, step in enumerate(playbook.steps):
        if isinstance(step.when, str):
            yield step.when, "expression", ("steps", index, "when")
        command = step.params.get("command")
        if isinstance(command, str):
            yield command, "shell", ("steps", index, "params", "command")


def check_runtime_templates(playbook: Playbook, doc: YamlDoc, known: Iterable[str] | None) -> None:
    """Syntax always; names too when `known` (the names of a host's run) is given."""
    for text, kind, path in runtime_templates(playbook):
        check_syntax(text, doc.location(path), kind)
        if known is not None:
            check_names(text, kind, known, doc.location(path))
    template = config_template_text(playbook, doc)
    if template is not None:
        where = doc.location(("daemon", "config_template"))
        check_syntax(template, where, "template")
        if known is not None:
            in_file = Location(str(playbook.daemon.config_template))
            check_names(template, "template", {*known, *CONFIG_TEMPLATE_NAMES}, in_file, True)


def config_template_text(playbook: Playbook, doc: YamlDoc) -> str | None:
    path = playbook.daemon.config_template
    if path is None:
        return None
    try:
        return Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        where = doc.location(("daemon", "config_template"))
        raise ConfigError(f"cannot read config template {path}: {_why(exc)}", where) from None


def _why(exc: Exception) -> str:
    return exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)


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
        if path.is_dir() != folder:
            raise ConfigError(f"not a {what}: {path}", doc.location(key))


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
