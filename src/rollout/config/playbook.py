"""The playbook: what to build, how to roll it out, how to check it.

Loading parses the YAML first (keeping lines), then renders its strings with Jinja2.
Variables, in increasing precedence: playbook `vars`, inventory host vars (only in
`Playbook.for_host`), `--set KEY=VALUE` overrides. At load time only the variables
are in scope (not `daemon`, `host`, ...); a var used per host needs a default in `vars`.

Runtime templates are left as written and rendered once, by the engine, with
`render.render_shell` / `render_runtime` / `evaluate_condition` and
`Playbook.template_context(host, release_dir=...)`: `validate.command` and a step's
`params.command`, each step's `when`, and the contents of the `daemon.config_template`
file. They are checked at load (syntax; names, per host: `playbook_checks`).
"""

from __future__ import annotations

import difflib
import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ValidationError
from ruamel.yaml import YAML
from ruamel.yaml.error import YAMLError

from rollout.errors import ConfigError, Location, UserError

from .hostvar_checks import check_host_vars, control_character
from .playbook_checks import (
    check_files,
    check_runtime_templates,
    config_template_text,
    nested_advice,
    secret_like_overrides,
    unused_overrides,
)
from .playbook_model import Playbook as Playbook  # re-exported: the playbook load_playbook gives
from .render import render_tree, resolve_vars
from .retired import retire_keys
from .steps import (
    CONTROLLER_KINDS,
    NoParams,
    Rules,
    StepSpec,
    StrictParams,
    corrected_order,
    step_order_problem,
)
from .yamldepth import MAX_VALUE_DEPTH
from .yamlfile import (
    MAX_VALUE_NODES,
    KeyPath,
    YamlDoc,
    check_unique_names,
    config_error,
    load_yaml,
    to_plain,
    validate,
)

PLAYBOOKS = Path(__file__).resolve().parent.parent / "resources/playbooks"
DEFAULT_PLAYBOOK = PLAYBOOKS / "rollout.yaml"
"""The real cuzk playbook: what a user's inventory gets without --playbook."""
LAB_PLAYBOOK = PLAYBOOKS / "lab.yaml"
"""The lab's playbook (the stand-in build), named by the inventory `lab.up` writes."""
RESERVED_NAMES = frozenset(
    {"host", "release_dir", "release_id", "rolling", "release", "build", "daemon", "validate",
     "params", "work"}
)
"""Names of the template context that variables may not take."""
RUNTIME_TEMPLATES = (
    "validate.command",
    "validate.env",
    "steps[].params.command",
    "steps[].when",
    "daemon.config_template",
    "work.cordon",
    "work.uncordon",
)
WORK_COMMANDS = (("work", "cordon"), ("work", "uncordon"))
"""The user's own commands of the `work` section (runtime templates, like validate.command)."""
_IDENTIFIER = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


@dataclass(frozen=True)
class HostKinds:
    """The host step kinds a playbook is checked against (config is below steps: the caller
    passes them, rollout.steps.kinds.load_playbook)."""

    params: Mapping[str, type[BaseModel]]  # each kind's params model, in the standard order
    rules: Rules  # each kind's place in the order


@dataclass(frozen=True)
class PlaybookSource:
    """A parsed playbook file before rendering, kept for per-host rendering."""

    doc: YamlDoc
    overrides: Mapping[str, Any]
    kinds: HostKinds
    settings: Mapping[str, Any] = field(default_factory=dict)
    """Dotted keys set by flags (`--adopt`: `preflight.adopt`), over whatever the playbook
    and its variables say."""
    builds: bool = True
    """Whether the build section is read and checked (only for commands that build)."""
    retired: tuple[str, ...] = ()
    """Warnings about retired keys (`retired.retire_keys`)."""
    _per_vars: dict[str, Playbook] = field(default_factory=dict, compare=False, repr=False)
    """Each host's rendering by its vars: a host whose vars equal an earlier host's gets a
    copy of that rendering (its checks too: they depend on the vars alone), not a second."""

    def render(
        self, host_vars: Mapping[str, Any] | None = None, host: str | None = None
    ) -> Playbook:
        key = None if host is None else _vars_key(host_vars or {})
        if host is not None and key is not None and key in self._per_vars:
            return self._per_vars[key].renamed(host)
        if host is not None:
            check_host_vars(self.doc, host_vars or {}, self.overrides, host, RESERVED_NAMES)
        try:
            playbook = self._render({**(host_vars or {}), **self.overrides}, host is not None)
        except ConfigError as exc:
            if host is None:
                raise
            raise ConfigError(f"(for host {host}) {exc.message}", exc.location) from exc
        playbook._source, playbook._host = self, host
        if key is not None:
            self._per_vars[key] = playbook
        if host is None:
            template = config_template_text(playbook, self.doc)
            unused = unused_overrides(self.doc, self.overrides, template)
            secrets = secret_like_overrides(self.overrides)
            advice = nested_advice(playbook, self.doc)
            moved = playbook._warnings  # steps run in the corrected order (_run_order)
            playbook._warnings = [*self.retired, *moved, *unused, *secrets, *advice]
        return playbook

    def _render(self, fixed_vars: Mapping[str, Any], for_host: bool = False) -> Playbook:
        root = self.doc.root
        if not isinstance(root, Mapping):
            raise ConfigError("a playbook must be a mapping of keys", self.doc.location(()))
        variables = resolve_vars(self._raw_vars(root), fixed_vars, self.doc.location)
        skip = {"vars"} if self.builds else {"vars", "build"}
        data = {
            key: render_tree(node, variables, self.doc.location, _is_runtime, (key,))
            for key, node in ((to_plain(k), v) for k, v in root.items())
            if key not in skip
        }
        if self.builds and "build" not in data:
            raise ConfigError("missing required key", self.doc.location(("build",)))
        data["vars"] = variables
        if "steps" not in data:
            data["steps"] = standard_steps(self.kinds, "build" in root)
        apply_settings(data, self.settings)
        playbook = validate(Playbook, data, self.doc, base_dir=self.doc.base_dir)
        warnings = _check_playbook(playbook, self.doc, self.builds, self.kinds)
        known = {*variables, *RESERVED_NAMES} if for_host else None
        outside = {n: "--set" if n in self.overrides else "the inventory" for n in fixed_vars}
        check_runtime_templates(playbook, self.doc, known, outside)
        playbook = _run_order(playbook, self.doc, self.kinds.rules)
        playbook._warnings = [*warnings, *playbook._warnings]
        return playbook

    def _raw_vars(self, root: Mapping[str, Any]) -> Mapping[str, Any]:
        raw = root.get("vars")
        if raw is None:
            return {}
        if not isinstance(raw, Mapping):
            where = self.doc.location(("vars",))
            raise ConfigError("vars must be a mapping of names to values", where)
        for name in raw:
            _check_var_name(str(name), self.doc.location(("vars", str(name))))
        return raw


def load_playbook(
    path: Path | str = DEFAULT_PLAYBOOK,
    overrides: Mapping[str, Any] | None = None,
    settings: Mapping[str, Any] | None = None,
    builds: bool = True,
    *,
    kinds: HostKinds,
) -> Playbook:
    """Read, render (playbook vars + overrides) and validate a playbook, its host steps
    against `kinds`. `settings` (dotted keys a flag sets) win over the playbook;
    `builds=False` leaves the build section unread (commands that only look at hosts)."""
    doc = load_yaml(path, "playbook")
    retired = tuple(retire_keys(doc))
    source = PlaybookSource(doc, dict(overrides or {}), kinds, dict(settings or {}), builds,
                            retired)
    return source.render()


def standard_steps(kinds: HostKinds, builds: bool) -> list[dict[str, str]]:
    """The steps of a playbook without `steps`: build and extract where it has a build
    section, then one step of each host kind, named after it, in the standard order."""
    names = [*(CONTROLLER_KINDS if builds else ()), *kinds.params]
    return [{"name": name, "kind": name} for name in names]


def apply_settings(data: dict[str, Any], settings: Mapping[str, Any]) -> None:
    """Set each dotted key (`preflight.adopt`) in rendered playbook data, in place."""
    for dotted, value in settings.items():
        *parents, last = dotted.split(".")
        node = data
        for key in parents:
            child = node.get(key)
            node[key] = child = dict(child) if isinstance(child, Mapping) else {}
            node = child
        node[last] = value


def parse_set_options(options: Iterable[str]) -> dict[str, Any]:
    """`--set` values, like Ansible's `-e`: `["pool=64", "version=1.10"]` ->
    `{"pool": "64", "version": "1.10"}` (strings, never guessed types). A value that starts
    with `{` or `[` is JSON/YAML (`--set 'gpus=[0, 1]'`); `@FILE` reads a YAML/JSON
    mapping of vars from FILE (typed as written there). Later options win."""
    out: dict[str, Any] = {}
    for option in options:
        if option.startswith("@"):
            out |= load_vars_file(option[1:])
            continue
        name, sep, value = option.partition("=")
        if not sep:
            raise UserError(f"--set {option!r}: expected KEY=VALUE, or @FILE (a YAML vars file)")
        _check_var_name(name.strip(), Location(f"--set {option}"))
        out[name.strip()] = _set_value(value, f"--set {name.strip()}")
        _check_controls(out[name.strip()], f"--set {name.strip()}")
    return out


def _set_value(text: str, what: str) -> Any:
    """The text itself; parsed as YAML (JSON is YAML) when it starts with `{` or `[`
    (but not `{{`, `{%`, `{#`: text that looks like a template, kept as inert text)."""
    start = text.lstrip()
    if start[:1] not in ("{", "[") or start[:2] in ("{{", "{%", "{#"):
        return text
    if _bracket_depth(text) > MAX_VALUE_DEPTH:
        raise UserError(f"{what}: nested deeper than {MAX_VALUE_DEPTH} levels")
    try:
        value = YAML(typ="safe", pure=True).load(text)
    except RecursionError:  # nesting the scan did not see (quotes it read otherwise)
        raise UserError(f"{what}: nested deeper than {MAX_VALUE_DEPTH} levels") from None
    except YAMLError as exc:
        problem = getattr(exc, "problem", None) or "not valid JSON/YAML"
        raise UserError(
            f"{what}: a value starting with {text.lstrip()[0]!r} is read as JSON/YAML: "
            f"{problem} (quote it in YAML, or use @FILE)"
        ) from None
    return plain_value(value, what)


def _bracket_depth(text: str) -> int:
    """The deepest nesting of [ and { outside quotes (checked before a parser recurses)."""
    depth = deepest = 0
    quote = ""
    escaped = False
    for char in text:
        if quote:
            if escaped:
                escaped = False
            elif char == "\\" and quote == '"':
                escaped = True
            elif char == quote:
                quote = ""
        elif char in "\"'":
            quote = char
        elif char in "[{":
            depth += 1
            deepest = max(deepest, depth)
        elif char in "]}":
            depth -= 1
    return deepest


def plain_value(value: Any, what: str) -> Any:
    """Parsed YAML as plain data (str/int/float/bool/None, lists, mappings with string
    keys); a date or any other type becomes its text. Deeper than MAX_VALUE_DEPTH, or more
    than MAX_VALUE_NODES values (YAML aliases repeat a node), is an error."""
    budget = [MAX_VALUE_NODES]

    def plain(node: Any, depth: int) -> Any:
        budget[0] -= 1
        if depth > MAX_VALUE_DEPTH or budget[0] < 0:
            limit = f"nested deeper than {MAX_VALUE_DEPTH} levels" if budget[0] >= 0 else (
                f"more than {MAX_VALUE_NODES} values")
            raise UserError(f"{what}: {limit}")
        if isinstance(node, Mapping):
            return {str(k): plain(v, depth + 1) for k, v in node.items()}
        if isinstance(node, list):
            return [plain(v, depth + 1) for v in node]
        if node is None or isinstance(node, bool):
            return node
        for kind in (int, float, str):
            if isinstance(node, kind):
                return kind(node)
        return str(node)

    return plain(value, 0)


def load_vars_file(path: str) -> dict[str, Any]:
    """`--set @vars.yaml`: a YAML (or JSON) mapping of variable names to values. The file
    may be any file, so no error quotes its text: not a value, nor a key that is not a
    variable name (its line is given)."""
    doc = load_yaml(path, "vars")
    if not isinstance(doc.root, Mapping):
        raise ConfigError("a vars file must be a mapping of names to values", doc.location(()))
    out = {}
    for name, value in doc.root.items():
        where = _var_location(doc, name)
        _check_var_name(name, where)
        try:
            out[name] = plain_value(value, str(where))
            _check_controls(out[name], str(where))
        except UserError as exc:
            raise ConfigError(exc.message.removeprefix(f"{where}: "), where) from None
    return out


def _var_location(doc: YamlDoc, name: Any) -> Location:
    """Where a vars file sets `name`; ConfigError, at its line and not naming it, when the
    key is not a variable name."""
    if not isinstance(name, str) or not _IDENTIFIER.match(name):
        line = doc.line_of((name,)) if isinstance(name, str | int) else None
        raise ConfigError("a key that is not an identifier (a variable name: letters, digits "
                          "and _, not first a digit)", Location(str(doc.path), line))
    return doc.location((name,))


def _check_controls(value: Any, what: str) -> None:
    """A --set value holds no NUL or other control character (tab, newline allowed)."""
    bad = control_character(value)
    if bad is not None:
        raise UserError(
            f"{what}: the value holds the control character {bad}; values may not hold NUL "
            "or control characters (tab and newline excepted)"
        )


def _check_var_name(name: str, where: Location) -> None:
    if not _IDENTIFIER.match(name):
        raise ConfigError(f"variable name {name!r} is not an identifier", where)
    if name in RESERVED_NAMES:
        raise ConfigError(f"variable name {name!r} is reserved for the template context", where)


def _vars_key(host_vars: Mapping[str, Any]) -> str | None:
    """Host vars as one canonical text (None where they have none: each host rendered on
    its own). Each value keeps its type: 1, 1.0, true and "1" stay apart."""
    try:
        return json.dumps(host_vars, sort_keys=True, default=_typed)
    except (TypeError, ValueError, RecursionError):
        return None


def _typed(value: Any) -> str:
    """A value JSON has no type for (a YAML date, ...), its type named."""
    return f"{type(value).__qualname__}:{value!r}"


def _is_runtime(path: KeyPath) -> bool:
    """Commands (a string, or each item of an argv list), their env values, `when`."""
    if path[:2] in (("validate", "command"), ("validate", "env"), *WORK_COMMANDS):
        return True
    in_step = len(path) > 2 and path[0] == "steps"
    return in_step and (path[2:] == ("when",) or path[2:4] == ("params", "command"))


def _check_kinds(playbook: Playbook, doc: YamlDoc, kinds: HostKinds) -> None:
    """Each step's kind is build, extract or a host kind: else its file:line, and the
    closest kind."""
    known = [*CONTROLLER_KINDS, *kinds.params]
    for index, step in enumerate(playbook.steps):
        if step.kind not in known:
            close = difflib.get_close_matches(step.kind, known, n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            raise ConfigError(f"unknown step kind {step.kind!r}{hint}; expected one of: "
                              f"{', '.join(map(repr, known))}",
                              doc.location(("steps", index, "kind")))


def _check_params(playbook: Playbook, doc: YamlDoc, kinds: HostKinds) -> list[str]:
    """Each step's params against its kind's model: a misspelt key names its file:line.
    The warnings of params that load but do not say what they seem to (file:line: why)."""
    warnings = []
    for index, step in enumerate(playbook.steps):
        model = kinds.params.get(step.kind, NoParams)
        at = ("steps", index, "params")
        try:
            params = model.model_validate(step.params)
        except ValidationError as exc:
            raise config_error(exc, model, step.params, doc, at) from None
        notes = params.load_warnings() if isinstance(params, StrictParams) else []
        warnings += [f"{doc.location((*at, key))}: step {step.name!r}: {note}"
                     for key, note in notes]
    return warnings


def _run_order(playbook: Playbook, doc: YamlDoc, rules: Rules) -> Playbook:
    """The playbook with its steps in the order they run: an order an earlier release
    allowed (KindRule.moved_after) corrected, with a warning naming the step's file:line and
    the fix, kept in the playbook's warnings. Called once every check has read the steps in
    the file's order (their locations are the file's)."""
    order, moved = corrected_order([(step.name, step.kind) for step in playbook.steps], rules)
    if not moved:
        return playbook
    fixed = playbook.model_copy(update={"steps": [playbook.steps[i] for i in order]})
    fixed._warnings = [_moved_warning(doc, playbook.steps[index], playbook.steps[anchor], index)
                       for index, anchor in moved]
    return fixed


def _moved_warning(doc: YamlDoc, step: StepSpec, anchor: StepSpec, index: int) -> str:
    return (f"{doc.location(('steps', index, 'kind'))}: step {step.name!r} ({step.kind}) "
            f"comes before step {anchor.name!r} ({anchor.kind}), which it must follow: it runs "
            f"right after it; move step {step.name!r} after step {anchor.name!r} (this order "
            "will stop loading)")


def _check_playbook(playbook: Playbook, doc: YamlDoc, builds: bool, kinds: HostKinds
                    ) -> list[str]:
    """The checks across steps and sections; the warnings of the steps' params."""
    check_unique_names(doc, "steps", [step.name for step in playbook.steps], "step")
    _check_kinds(playbook, doc, kinds)
    warnings = _check_params(playbook, doc, kinds)
    scopes = [step.scope for step in playbook.steps]
    if "host" in scopes and "controller" in scopes[scopes.index("host") :]:
        index = scopes.index("controller", scopes.index("host"))
        raise ConfigError(
            "build and extract steps run once on the controller and must come before host steps",
            doc.location(("steps", index, "kind")),
        )
    steps = [(step.name, step.kind) for step in playbook.steps]
    order, _ = corrected_order(steps, kinds.rules)
    problem = step_order_problem([steps[i] for i in order], kinds.rules)
    if problem is not None:
        raise ConfigError(problem[1], doc.location(("steps", order[problem[0]], "kind")))
    check_files(playbook, doc)
    if not builds:
        return warnings
    missing = [n for n in playbook.release.executables if n not in playbook.build.image_paths]
    if missing:
        raise ConfigError(
            f"no image path for executable(s) {', '.join(missing)}",
            doc.location(("build", "image_paths")),
        )
    return warnings
