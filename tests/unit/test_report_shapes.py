"""Report shapes declared once (issue 26): each typed report class in host/reports.py reads
only keys its actions declare (ops.SPECS), with types its fields can hold, by one reader of
hostile data; and the fake host answers only in the declared shapes."""

from __future__ import annotations

import types
import typing
from dataclasses import fields, is_dataclass
from typing import Any

import pytest
from fakehost import CANNED, SPECS, FakeHost, canned, shape_problem
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rollout.host import reports
from rollout.host.reports import shape_of
from rollout.host.scripts.actions.spec import type_of

CLASSES = [c for c in vars(reports).values() if isinstance(c, type) and is_dataclass(c)
           and c.__module__ == reports.__name__ and c is not reports.Parsed]
READ = [f for c in CLASSES for f in fields(c) if f.name != "raw" and not f.metadata.get(
    "derived")]


def is_of(value: Any, hint: Any) -> bool:
    """Whether a value is of a field's annotated type (as far as reports use types)."""
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin in (typing.Union, types.UnionType):
        return any(is_of(value, a) for a in args)
    if hint is Any:
        return True
    if hint is type(None):
        return value is None
    if origin is tuple:
        return isinstance(value, tuple) and all(is_of(v, args[0]) for v in value)
    if origin is dict:
        return isinstance(value, dict) and all(
            isinstance(k, str) and is_of(v, args[1]) for k, v in value.items())
    if hint in (int, float):
        return isinstance(value, (int, float) if hint is float else int) and not isinstance(
            value, bool)
    return isinstance(value, hint)


def parsed(cls: type, doc: Any) -> Any:
    parse = getattr(cls, "parse", None)  # Partitions: read only as a job's part
    return parse(doc) if parse else reports.read(cls, doc)


def assert_typed(cls: type, doc: Any) -> None:
    report = parsed(cls, doc)
    if report is None:
        assert cls in (reports.Job, reports.BudgetWait)  # a block that is not one
        return
    hints = typing.get_type_hints(cls, vars(reports))
    for f in fields(cls):
        assert is_of(getattr(report, f.name), hints[f.name]), (cls.__name__, f.name, doc)


# ---------------------------------------------------------------- the declarations


def test_every_report_field_is_a_key_its_actions_declare() -> None:
    for cls in CLASSES:
        shape = shape_of(cls)
        for f in fields(cls):
            if f.name == "raw" or f.metadata.get("derived"):
                continue
            assert f.name in shape, f"{cls.__name__}.{f.name} is no declared key"
            actions = getattr(cls, "ACTIONS", ())
            declaring = [a for a in actions if f.name in SPECS[a]["returns"]]
            if actions and f.name not in ("outcome", "reason"):
                assert declaring, f"{cls.__name__}.{f.name}: none of {actions} declares it"
            kinds = {type_of(SPECS[a]["returns"][f.name]) for a in declaring}
            assert len(kinds) <= 1, (cls.__name__, f.name, kinds)  # one type for one key


def sample(kind: str) -> Any:
    """One value of a declared type (nested where the type is a list or object of one)."""
    base = kind.removesuffix("?")
    if base[0] in "[{":
        one = sample(base[1:-1])
        return [one] if base[0] == "[" else {"name": one}
    return {"str": "a", "int": 3, "float": 1.5, "bool": True, "obj": {}, "list": [],
            "any": None}[base]


@pytest.mark.parametrize("cls", CLASSES, ids=lambda c: c.__name__)
def test_a_report_of_the_declared_shape_reads_into_its_fields_types(cls: type) -> None:
    """A shape change that breaks a parser fails here: a key typed otherwise than its field."""
    shape = shape_of(cls)
    assert_typed(cls, {k: sample(kind) for k, kind in shape.items()})
    assert_typed(cls, {k: None for k in shape})


def test_the_reader_keeps_what_fits_and_the_raw_report() -> None:
    doc = {"outcome": "busy", "reason": "r" * 400, "queue_depth": -1,
           "jobs": [{"kind": "k", "id": "i", "age": 2}, "x", None]}
    work = reports.WorkReport.parse(doc)
    assert (work.outcome, len(work.reason), work.queue_depth) == ("busy", 300, None)
    assert work.jobs == (reports.Job("k", "i", 2.0),) and work.raw is doc
    assert reports.Report.parse({"outcome": 7}).outcome == "unknown"


# ---------------------------------------------------------------- hostile reports, generated

JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**70), 2**70) | st.floats() | st.text(max_size=30),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner,
                                                                max_size=4),
    max_leaves=12)


def fitting(kind: str) -> st.SearchStrategy[Any]:
    """Values of a declared type, as a host that keeps its declaration may send them."""
    base = kind.removesuffix("?")
    none = st.none() if kind.endswith("?") else st.nothing()
    if base[0] == "[":
        return none | st.lists(fitting(base[1:-1]), max_size=4)
    if base[0] == "{":
        return none | st.dictionaries(st.text(max_size=8), fitting(base[1:-1]), max_size=4)
    return none | {"str": st.text(max_size=40), "int": st.integers(-(2**62), 2**62),
                   "float": st.floats(allow_nan=False, allow_infinity=False),
                   "bool": st.booleans(), "obj": st.dictionaries(st.text(max_size=8),
                                                                 JSON_VALUES, max_size=3),
                   "list": st.lists(JSON_VALUES, max_size=3), "any": JSON_VALUES}[base]


def reports_of(cls: type) -> st.SearchStrategy[Any]:
    """A report with its class's declared keys, each of its type or anything at all; or
    anything at all in its place."""
    keys = {k: fitting(kind) | JSON_VALUES for k, kind in shape_of(cls).items()}
    return st.fixed_dictionaries({}, optional=keys) | JSON_VALUES


@pytest.mark.parametrize("cls", CLASSES, ids=lambda c: c.__name__)
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_any_report_reads_into_its_fields_types_never_a_crash(cls: type, data: Any) -> None:
    assert_typed(cls, data.draw(reports_of(cls)))


# ---------------------------------------------------------------- the fake host


def test_the_fake_host_answers_only_in_the_declared_shapes() -> None:
    for action, word in CANNED.items():
        assert shape_problem(action, canned(action, word)) is None, action
    assert set(CANNED) <= set(SPECS) and not any(hasattr(FakeHost, f"_op_{a}") for a in CANNED)


class WrongHost(FakeHost):
    """A fake whose hold answers with a key ops.hold never gives."""

    def _op_hold(self, root: str) -> dict[str, Any]:
        return {"outcome": "set", "reason": "hold set", "pid": 1}


def test_a_fake_answer_the_real_host_cannot_give_fails_the_test() -> None:
    with pytest.raises(AssertionError, match="hold answer: undeclared key 'pid'"):
        WrongHost("h").call("", "ops.hold", {"root": "/data"})
    batched = {"calls": [{"call": "hold", "kwargs": {"root": "/data"}}]}
    with pytest.raises(AssertionError, match="undeclared key 'pid'"):
        WrongHost("h").call("", "ops.batch", batched)
