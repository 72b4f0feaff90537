"""Each host action's declared arguments and report, as data (mitogen's arg_spec, an
Ansible module's argument_spec and RETURN): `call` checks the arguments before the action
runs, and the controller reads the same table (ops.SPECS).

A declaration is "name:type ..." words; a type is str, int, float (an int is one too),
bool, obj (a JSON object), list, any, [T] (a list of T) or {T} (an object of T), and a
trailing "?" allows None. Defaults are the function's own."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any, TypeVar

F = TypeVar("F", bound=Callable[..., Any])
DECLARED: dict[str, tuple[Callable[..., Any], str, str, str]] = {}
"""Per action: (its function, its arguments, its report's keys, its outcome words), as
written; spec_of() reads one as data (only the action called: a forked call pays for it)."""

_SCALARS: dict[str, Callable[[Any], bool]] = {
    "str": lambda v: isinstance(v, str),
    "int": lambda v: isinstance(v, int) and not isinstance(v, bool),
    "float": lambda v: isinstance(v, (int, float)) and not isinstance(v, bool)
    and math.isfinite(v),
    "bool": lambda v: isinstance(v, bool),
    "obj": lambda v: isinstance(v, dict),
    "list": lambda v: isinstance(v, list),
    "any": lambda v: True,
}


def fits(value: Any, kind: str) -> bool:
    """Whether a JSON value is of the declared type."""
    if kind.endswith("?"):
        return value is None or fits(value, kind[:-1])
    if kind.startswith("["):
        return isinstance(value, list) and all(fits(v, kind[1:-1]) for v in value)
    if kind.startswith("{"):
        return isinstance(value, dict) and all(
            isinstance(k, str) and fits(v, kind[1:-1]) for k, v in value.items())
    return _SCALARS[kind](value)


def _fields(words: str) -> dict[str, dict[str, Any]]:
    out = {}
    for word in words.split():
        name, _, kind = word.partition(":")
        out[name] = {"type": kind.rstrip("?") if kind.endswith("?") else kind,
                     "none": kind.endswith("?")}
    return out


IN_AGENT: set[str] = set()
"""The actions declared `in_agent`: the host's agent runs them in its own process, without
forking a child (about 8 ms of a host's CPU per call). Only an action that starts no child,
sends no signal, waits on nothing (no lock, no network, no other process's /proc files) and
reads or writes a bounded amount: a call in the agent has no timeout that could kill it."""

WARMS: dict[str, tuple[str, ...]] = {}
"""Per action, the costly modules it imports (http.client: about 30 ms of a host's CPU),
which the agent imports once, before it forks the action's first call: each later fork
finds them loaded, and a command that never calls such an action (status, a rerun with
nothing to do) never imports them. tests/unit/test_host_cpu.py checks it against the code."""


def action(args: str, returns: str = "", outcomes: str = "",
           in_agent: bool = False, warms: str = "") -> Callable[[F], F]:
    """Declare a host action's arguments, its report's keys and its outcome words (and
    whether the agent runs it in its own process: IN_AGENT; the modules it imports that
    the agent loads before its first fork: WARMS)."""

    def declare(fn: F) -> F:
        DECLARED[fn.__name__] = (fn, args, returns, outcomes)
        if in_agent:
            IN_AGENT.add(fn.__name__)
        if warms:
            WARMS[fn.__name__] = tuple(warms.split())
        return fn

    return declare


def spec_of(name: str) -> dict[str, Any]:
    """One action's declaration as data: "args" (name: type, none, required, default; the
    defaults are the function's own), "returns" (key: type, none; besides "outcome" and
    "reason"), "outcomes" (its words; none: its report has no outcome)."""
    fn, args, returns, outcomes = DECLARED[name]
    given = fn.__defaults__ or ()
    first = fn.__code__.co_argcount - len(given)
    defaults = {fn.__code__.co_varnames[first + i]: value for i, value in enumerate(given)}
    spec = _fields(args)
    for arg, field in spec.items():
        field["required"] = arg not in defaults
        if arg in defaults:
            field["default"] = defaults[arg]
    return {"args": spec, "returns": _fields(returns), "outcomes": outcomes.split()}


def type_of(field: dict[str, Any]) -> str:
    """A declared field's type as written ("int?" where None is allowed)."""
    return str(field["type"]) + ("?" if field["none"] else "")


def misfit(fn: Any, kwargs: dict[str, Any]) -> str | None:
    """Why these keyword arguments do not fit the action `fn`'s declaration (None: they
    do): an unknown name, a required one missing, a value of the wrong type."""
    spec = spec_of(fn.__name__)["args"]
    for name in kwargs:
        if name not in spec:
            return f"got an unexpected keyword argument {name[:80]!r}"
    missing = [n for n, f in spec.items() if f["required"] and n not in kwargs]
    if missing:
        return f"missing a required argument: {missing[0]!r}"
    for name, value in kwargs.items():
        if not fits(value, type_of(spec[name])):
            return (f"argument {name!r} must be {type_of(spec[name])}, "
                    f"not {type(value).__name__}")
    return None
