"""Read YAML with line numbers, and turn validation errors into ConfigErrors that name
the file, the line and the dotted key (`fleet.yaml:7: hosts[1].port: ...`)."""

from __future__ import annotations

import difflib
import re
import types
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar, Union, get_args, get_origin

from pydantic import BaseModel, ValidationError
from pydantic_core import ErrorDetails
from ruamel.yaml import YAML
from ruamel.yaml.comments import CommentedMap, CommentedSeq
from ruamel.yaml.error import MarkedYAMLError, YAMLError

from rollout.errors import ConfigError, Location
from rollout.readfile import read_text

from .yamldepth import MAX_VALUE_DEPTH, too_deep

KeyPath = tuple[str | int, ...]
ModelT = TypeVar("ModelT", bound=BaseModel)


@dataclass(frozen=True)
class YamlDoc:
    """A parsed YAML file. `root` is ruamel's round-trip data, which knows its lines."""

    path: Path
    root: Any

    @property
    def base_dir(self) -> Path:
        """The folder that relative paths in this file are relative to."""
        return self.path.absolute().parent

    def line_of(self, path: KeyPath) -> int | None:
        """1-based line of the key at `path`, or of its nearest parent that exists."""
        node, line = self.root, None
        for seg in path:
            if isinstance(node, CommentedMap) and seg in node:
                line = _key_line(node, seg)
            elif isinstance(node, CommentedSeq) and isinstance(seg, int) and 0 <= seg < len(node):
                line = node.lc.item(seg)[0]
            else:
                break
            node = node[seg]
        return None if line is None else line + 1

    def location(self, path: KeyPath) -> Location:
        return Location(str(self.path), self.line_of(path), dotted_key(path) or None)


def _key_line(node: CommentedMap, key: Any) -> int:
    """0-based line of `key` in `node`; a key that a merge (`<<: *base`) brought in has the
    line where the merged mapping wrote it."""
    if key in node.lc.data:
        return int(node.lc.key(key)[0])
    merged = (m for m in getattr(node, "merge", ()) if isinstance(m, CommentedMap) and key in m)
    source = next(merged, None)
    return node.lc.line if source is None else _key_line(source, key)


def load_yaml(path: Path | str, what: str, quotes: bool = False,
              inside: Path | None = None) -> YamlDoc:
    """Parse `path` (read by rollout.readfile: a regular file, bounded; `inside`: a file
    found by walking that folder must resolve within it). A file that cannot be read, bad
    YAML, or more than MAX_VALUE_NODES values (aliases expanded) raises ConfigError with
    the line, never quoting the file. `quotes`: a quoted string stays a ruamel
    ScalarString, a plain one a str."""
    file = Path(path)
    text = read_text(file, f"{what} file", inside=inside)
    deep = too_deep(text)  # before ruamel, whose scanner spends seconds on such a file
    if deep is not None:
        raise ConfigError(f"invalid YAML: nested deeper than {MAX_VALUE_DEPTH} levels",
                          Location(str(file), deep))
    try:
        yaml = YAML(typ="rt")
        yaml.preserve_quotes = quotes
        root = yaml.load(text)
    except MarkedYAMLError as exc:
        raise ConfigError(f"invalid YAML: {_problem(exc)}", Location(str(file), _line(exc))) \
            from None
    except YAMLError:
        raise ConfigError("invalid YAML", Location(str(file))) from None
    except RecursionError:
        raise ConfigError("invalid YAML: nested too deeply", Location(str(file))) from None
    doc = YamlDoc(file, CommentedMap() if root is None else root)
    _check_size(doc)
    return doc


def _line(exc: MarkedYAMLError) -> int | None:
    mark = exc.problem_mark or exc.context_mark
    return mark.line + 1 if mark is not None else None


def _problem(exc: MarkedYAMLError) -> str:
    """ruamel's words for the problem without the file's text: what it quotes is shown as
    '...' (a lone punctuation mark, as in `expected ':'`, is kept); an unmatched quote or
    a line break ends it."""
    problem = str(exc.problem or exc.context or "syntax error")
    out, at = "", 0
    for m in _QUOTED.finditer(problem):
        out += problem[at:m.start()]
        if m[1] is None:
            break
        out += m[0] if _PUNCTUATION.fullmatch(m[2]) else f"{m[1]}...{m[1]}"
        at = m.end()
    else:
        out += problem[at:]
    return out.strip() or "syntax error"


_QUOTED = re.compile(r"""(['"])(.*?)\1|['"\n]""", re.DOTALL)
_PUNCTUATION = re.compile(r"[^\w\s]")


MAX_VALUE_NODES = 100_000
"""How many values (at any depth, YAML aliases expanded) a YAML file, a --set value or a
vars file may hold: a few aliases to aliases (a "billion laughs") name billions."""


def _check_size(doc: YamlDoc) -> None:
    """ConfigError when `doc`, its aliases expanded, holds more than MAX_VALUE_NODES values
    or nests deeper than MAX_VALUE_DEPTH (a node that held itself would). Each node is
    counted once, not once per alias, so a bomb is refused in the time its text takes."""
    sizes: dict[int, tuple[int, int]] = {}  # id(node) -> (values, height)

    def size(node: Any, depth: int) -> tuple[int, int]:
        if depth > MAX_VALUE_DEPTH:
            raise _refused(doc, node, f"nested deeper than {MAX_VALUE_DEPTH} levels")
        if not isinstance(node, Mapping | list):
            return 1, 0
        known = sizes.get(id(node))
        if known is None:
            known = _sum(size(child, depth + 1) for child in _children(node))
            sizes[id(node)] = known
        if known[0] > MAX_VALUE_NODES:
            raise _refused(doc, node, f"more than {MAX_VALUE_NODES:,} values")
        if depth + known[1] > MAX_VALUE_DEPTH:
            raise _refused(doc, node, f"nested deeper than {MAX_VALUE_DEPTH} levels")
        return known

    size(doc.root, 0)


def _children(node: Mapping[Any, Any] | list[Any]) -> list[Any]:
    return list(node.values()) if isinstance(node, Mapping) else list(node)


def _sum(children: Iterable[tuple[int, int]]) -> tuple[int, int]:
    values, height = 1, 0
    for child_values, child_height in children:
        values, height = values + child_values, max(height, child_height + 1)
    return values, height


def _refused(doc: YamlDoc, node: Any, why: str) -> ConfigError:
    """The error for a node too large or too deep once its aliases are expanded, at the
    line where the node starts."""
    line = node.lc.line + 1 if isinstance(node, CommentedMap | CommentedSeq) else None
    return ConfigError(f"invalid YAML: {why}, its aliases expanded", Location(str(doc.path), line))


def check_unique_names(doc: YamlDoc, section: str, names: list[str], what: str) -> None:
    """Names in the list under `section` are unique; a repeat is an error at its own line."""
    seen: dict[str, int] = {}
    for index, name in enumerate(names):
        if name in seen:
            first = doc.line_of((section, seen[name], "name"))
            raise ConfigError(
                f"duplicate {what} name {name!r} (first defined on line {first})",
                doc.location((section, index, "name")),
            )
        seen[name] = index


def dotted_key(path: KeyPath) -> str:
    """('hosts', 1, 'port') -> 'hosts[1].port'."""
    out = ""
    for seg in path:
        if isinstance(seg, int):
            out += f"[{seg}]"
        else:
            out += f".{seg}" if out else str(seg)
    return out


def to_plain(node: Any) -> Any:
    """Round-trip data -> plain dict/list/str/int/float/bool (ruamel subclasses dropped)."""
    if isinstance(node, Mapping):
        return {to_plain(k): to_plain(v) for k, v in node.items()}
    if isinstance(node, list):
        return [to_plain(v) for v in node]
    for plain in (bool, int, float, str):
        if isinstance(node, plain):
            return plain(node)
    return node


def validate(model: type[ModelT], data: Any, doc: YamlDoc, **context: Any) -> ModelT:
    """Validate plain `data` (parsed from `doc`) against `model`; errors name file and line."""
    try:
        return model.model_validate(data, context=context)
    except ValidationError as exc:
        raise config_error(exc, model, data, doc) from None


def config_error(
    exc: ValidationError, model: type[BaseModel], data: Any, doc: YamlDoc, at: KeyPath = ()
) -> ConfigError:
    """The errors of validating `data`, found at key path `at` of `doc`, as one ConfigError."""
    problems = []
    for err in exc.errors(include_url=False):
        path = _data_path(data, err["loc"])
        problems.append((doc.location((*at, *path)), _message(err, model, path)))
    (where, message), *rest = problems
    message += "".join(f"\n  also {loc}: {msg}" for loc, msg in rest)
    return ConfigError(message, where)


def _data_path(data: Any, loc: tuple[str | int, ...]) -> KeyPath:
    """The part of pydantic's `loc` that names keys in the data (drops union tags)."""
    path: list[str | int] = []
    node = data
    for seg in loc:
        if isinstance(node, Mapping) and not isinstance(seg, int):
            path.append(seg)
            node = node.get(seg)
        elif isinstance(node, list) and isinstance(seg, int):
            path.append(seg)
            node = node[seg] if seg < len(node) else None
        else:
            break
    return tuple(path)


def _message(err: ErrorDetails, model: type[BaseModel], path: KeyPath) -> str:
    if err["type"] == "missing":
        return "missing required key"
    if err["type"] == "extra_forbidden":
        known = _fields_at(model, path[:-1])
        close = difflib.get_close_matches(str(path[-1]), known, n=1) if path else []
        hint = f" (did you mean '{close[0]}'?)" if close else ""
        return f"unknown key{hint}; expected one of: {', '.join(known)}"
    return str(err["msg"]).removeprefix("Value error, ")


def _fields_at(model: type[BaseModel], path: KeyPath) -> list[str]:
    """Names of the keys allowed at `path` in `model` (for 'did you mean')."""
    tp: Any = model
    for seg in path:
        tp = _child_type(tp, seg)
    tp = _model_in(tp)
    if tp is None:
        return []
    return [field.alias or name for name, field in tp.model_fields.items()]


def _child_type(tp: Any, seg: str | int) -> Any:
    model = _model_in(tp)
    if model is not None:
        for name, field in model.model_fields.items():
            if seg in (name, field.alias):
                return field.annotation
        return None
    origin, args = get_origin(tp), get_args(tp)
    if isinstance(seg, int) and origin in (list, tuple, Sequence) and args:
        return args[0]
    if origin in (dict, Mapping) and len(args) == 2:
        return args[1]
    return None


def _model_in(tp: Any) -> type[BaseModel] | None:
    """`tp` itself, or the model inside `X | None`, when it is a pydantic model."""
    if get_origin(tp) in (Union, types.UnionType):
        return next((m for m in map(_model_in, get_args(tp)) if m is not None), None)
    return tp if isinstance(tp, type) and issubclass(tp, BaseModel) else None
