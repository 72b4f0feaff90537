"""Every host step kind's decision as data, in the style of pyinfra's operation fixtures
(tests/test_operations.py): each file under cases/<kind>/ gives a host's facts, the playbook,
the release and the kind's params, and expects what the kind's pure decide returns for them.
The kinds are those of rollout.steps.kinds.KINDS, each called as KINDS[kind].decide; a case
is found by its folder alone, and every kind must have cases.

A case (YAML):
- `description`: one line.
- `facts`: merged over cases/facts-base.yaml (the facts script's JSON: mappings key by key,
  anything else replaced whole, null removes the key). "@sha256:NAME" stands for the sha256
  of what the step would write there: `supervisor` (the script), `supervisor_conf` (its
  settings for the case's params) or `config` (the daemon's config for the case's facts).
- `playbook`: merged over a minimal playbook; `host_vars`: the host's inventory vars;
  `files`: {NAME: TEXT} written beside the playbook (a source it names, relative to it).
- `release`: {id, artifacts: [{name, sha256, size}], build_args (optional)}, or absent (a
  single step); `pending`:
  the dry run's release of a build not made yet.
- `params`: the kind's params, checked by its model (KINDS[kind].params).
- `expect`: `decision` (skip | act | fail: an Action with `fails` | raises: decide raises
  StepFailed | invalid: the kind's model refuses the params), `summary` (the summary, skip reason or
  error, exactly) or `summary_has` (fragments), and optionally `fails` (or `fails_has`:
  fragments of it), `data` (a skip's),
  `detail` (the action's detail: its value, or some of its fields) and `calls`.
- `xfail`: why the case shows a known fault (the test then expects it to fail).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from contexts import small_host
from pydantic import BaseModel, ValidationError
from ruamel.yaml import YAML
from ruamel.yaml.error import YAMLError

from rollout.errors import StepFailed
from rollout.host.facts import HostFacts
from rollout.host.layout import Layout
from rollout.host.scripts import script_text
from rollout.steps import config
from rollout.steps.decision import Action, Artifact, Decision, Release, Skip, Target
from rollout.steps.kinds import KINDS, load_playbook, supervise
from rollout.steps.kinds.supervise import SuperviseParams

CASES = Path(__file__).parent / "cases"
BASE_FACTS = CASES / "facts-base.yaml"
MINIMAL_PLAYBOOK: dict[str, Any] = {"name": "kind cases",
                                    "steps": [{"name": "preflight", "kind": "preflight"}]}
CASE_KEYS = {"description", "facts", "playbook", "host_vars", "release", "pending", "params",
             "expect", "xfail", "files"}
EXPECT_KEYS = {"decision", "summary", "summary_has", "fails", "fails_has", "data", "detail",
               "calls"}
DECISIONS = ("skip", "act", "fail", "raises", "invalid")
DIGEST_MARK = "@sha256:"
WRITTEN: dict[str, Callable[[HostFacts, Target, BaseModel], str]] = {
    "supervisor": lambda facts, target, params: script_text("supervisor"),
    "supervisor_conf": lambda facts, target, params: supervise.supervisor_conf(
        target, params if isinstance(params, SuperviseParams) else SuperviseParams()),
    "config": lambda facts, target, params: config.render(facts, target).text,
}
"""What "@sha256:NAME" in a case's facts is the digest of."""
NEVER_SKIPS = {"preflight": "its decide always acts: its checks decide in its apply"}
"""Kinds whose decide has no skip to show, and why."""


class CaseError(Exception):
    """A case file that does not say a case: named, with what is wrong."""


def case_paths() -> list[Path]:
    return [p for kind in KINDS for p in sorted((CASES / kind).glob("*.yaml"))]


def read_yaml(path: Path) -> Any:
    try:
        return YAML(typ="safe", pure=True).load(path.read_text())
    except (OSError, YAMLError) as exc:
        raise CaseError(f"{path}: not readable YAML: {exc}") from exc


def load_case(path: Path) -> dict[str, Any]:
    """The case in `path`, its keys checked; a CaseError naming the file where it is not one."""
    case = read_yaml(path)
    if not isinstance(case, dict):
        raise CaseError(f"{path}: a case is a mapping, not {type(case).__name__}")
    problems = [f"unknown key {k!r}" for k in case if k not in CASE_KEYS]
    if not isinstance(case.get("description"), str):
        problems.append("`description` (one line) is missing")
    expect = case.get("expect")
    if not isinstance(expect, dict):
        problems.append("`expect` (a mapping) is missing")
    else:
        problems += [f"unknown key 'expect.{k}'" for k in expect if k not in EXPECT_KEYS]
        if expect.get("decision") not in DECISIONS:
            problems.append(f"expect.decision must be one of {', '.join(DECISIONS)}")
        if ("summary" in expect) == ("summary_has" in expect):
            problems.append("expect needs one of `summary` and `summary_has`")
        fragments = expect.get("summary_has", [])
        if not (isinstance(fragments, list) and all(isinstance(f, str) for f in fragments)):
            problems.append("expect.summary_has must be a list of strings")
    for key in ("facts", "playbook", "host_vars", "params"):
        if not isinstance(case.get(key, {}), dict):
            problems.append(f"`{key}` must be a mapping")
    if problems:
        raise CaseError(f"{path}: {'; '.join(problems)}")
    return case


@contextmanager
def named(path: Path) -> Iterator[None]:
    """Whatever goes wrong while a case is built names the case's file."""
    try:
        yield
    except CaseError:
        raise
    except Exception as exc:
        raise CaseError(f"{path}: {type(exc).__name__}: {exc}") from exc


def merged(base: Any, over: Any) -> Any:
    """`over` on `base`: mappings key by key (None removes a key), anything else replaced."""
    if not (isinstance(base, dict) and isinstance(over, dict)):
        return over
    out = dict(base)
    for key, value in over.items():
        if value is None:
            out.pop(key, None)
        else:
            out[key] = merged(base.get(key), value)
    return out


def target_of(case: dict[str, Any], tmp: Path) -> Target:
    host = small_host("h1", **case.get("host_vars", {}))
    for name, text in case.get("files", {}).items():  # beside the playbook: its sources
        (tmp / name).write_text(text)
    file = tmp / "playbook.yaml"
    file.write_text(json.dumps(merged(MINIMAL_PLAYBOOK, case.get("playbook", {}))))
    settings = load_playbook(file, builds=False).for_host(host)
    given = case.get("release")
    release = None if given is None else Release(
        given["id"], "img", "v1",
        tuple(Artifact(a["name"], "/nowhere", a["sha256"], a["size"])
              for a in given["artifacts"]),
        build_args=tuple(sorted(given.get("build_args", {}).items())))
    return Target(host, Layout(), settings, release, bool(case.get("pending", False)))


def with_digests(raw: Any, facts: HostFacts, target: Target, params: BaseModel) -> Any:
    """The facts with each "@sha256:NAME" replaced by the digest of what NAME stands for."""
    if isinstance(raw, dict):
        return {k: with_digests(v, facts, target, params) for k, v in raw.items()}
    if isinstance(raw, list):
        return [with_digests(v, facts, target, params) for v in raw]
    if isinstance(raw, str) and raw.startswith(DIGEST_MARK):
        name = raw.removeprefix(DIGEST_MARK)
        if name not in WRITTEN:
            raise ValueError(f"{raw!r}: one of {', '.join(DIGEST_MARK + n for n in WRITTEN)}")
        return hashlib.sha256(WRITTEN[name](facts, target, params).encode()).hexdigest()
    return raw


def facts_of(case: dict[str, Any], target: Target, params: BaseModel) -> HostFacts:
    raw = merged(read_yaml(BASE_FACTS), case.get("facts", {}))
    first = HostFacts.parse(raw)  # the digests stand for what is written from these facts
    return HostFacts.parse(with_digests(raw, first, target, params))


def plain(value: Any) -> Any:
    """A detail's value as a case writes it: tuples as lists, all the way down."""
    if isinstance(value, tuple | list):
        return [plain(v) for v in value]
    if isinstance(value, dict):
        return {k: plain(v) for k, v in value.items()}
    return value


def check_detail(detail: Any, want: Any) -> None:
    if not isinstance(want, dict) or isinstance(detail, dict):
        assert plain(detail) == want
        return
    for key, value in want.items():
        assert plain(getattr(detail, key)) == value, key


def check_decision(decision: Decision, expect: dict[str, Any]) -> None:
    if isinstance(decision, Skip):
        got, text = "skip", decision.reason
    else:
        assert isinstance(decision, Action), decision
        got, text = "fail" if decision.fails else "act", decision.summary
    assert got == expect["decision"], (got, text)
    check_text(text, expect)
    if "fails" in expect:
        assert isinstance(decision, Action) and decision.fails == expect["fails"]
    for fragment in expect.get("fails_has", []):
        assert isinstance(decision, Action) and fragment in str(decision.fails)
    if "data" in expect:
        assert isinstance(decision, Skip) and plain(decision.data) == expect["data"]
    if "detail" in expect:
        check_detail(decision.detail if isinstance(decision, Action) else None, expect["detail"])
    if "calls" in expect and hasattr(decision, "calls"):
        assert [c.as_json() for c in decision.calls] == expect["calls"]


def check_text(text: str, expect: dict[str, Any]) -> None:
    if "summary" in expect:
        assert text == expect["summary"]
    for fragment in expect.get("summary_has", []):
        assert fragment in text


def run_case(path: Path, tmp: Path) -> None:
    """Build the case, call its kind's decide (KINDS[kind].decide), compare."""
    kind = path.parent.name
    case = load_case(path)
    expect = case["expect"]
    decide = KINDS[kind].decide
    try:
        params = KINDS[kind].params.model_validate(case.get("params", {}))
    except ValidationError as exc:
        assert expect["decision"] == "invalid", f"{path}: params refused: {exc}"
        check_text(str(exc), expect)
        return
    with named(path):
        target = target_of(case, tmp)
        facts = facts_of(case, target, params)
    if expect["decision"] == "raises":
        with pytest.raises(StepFailed) as raised:
            decide(facts, target, params)
        check_text(str(raised.value), expect)
        return
    check_decision(decide(facts, target, params), expect)


@pytest.mark.parametrize("path", case_paths(), ids=lambda p: str(p.relative_to(CASES)))
def test_kind_case(path: Path, tmp_path: Path) -> None:
    why = load_case(path).get("xfail")
    if why is None:
        run_case(path, tmp_path)
        return
    try:
        run_case(path, tmp_path)
    except Exception:  # AssertionError included: the fault the case shows
        pytest.xfail(str(why))
    pytest.fail(f"{path}: passes now: drop its `xfail`")


def test_every_host_kind_has_a_skip_and_an_act_case() -> None:
    """A kind added to KINDS without cases fails here; so does a case folder of no kind."""
    decisions: dict[str, set[str]] = {kind: set() for kind in KINDS}
    for path in case_paths():
        decisions[path.parent.name].add(load_case(path)["expect"]["decision"])
    lacking = {k: {"skip", "act"} - d - ({"skip"} if k in NEVER_SKIPS else set())
               for k, d in decisions.items()}
    assert not any(lacking.values()), f"kinds without these cases: {lacking}"
    assert not any("skip" in decisions[k] for k in NEVER_SKIPS), "drop it from NEVER_SKIPS"
    folders = {p.name for p in CASES.iterdir() if p.is_dir()}
    assert folders - {"budget"} <= set(KINDS), folders - set(KINDS)


@pytest.mark.parametrize("text, says", [
    ("description: x\nexpect: [", "not readable YAML"),
    ("- a list\n", "a case is a mapping"),
    ("description: x\nexpect: {decision: act, summary: s}\nfact: {}\n", "unknown key 'fact'"),
    ("description: x\nexpect: {decision: acts, summary: s}\n", "expect.decision"),
    ("description: x\nexpect: {decision: act}\n", "one of `summary` and `summary_has`"),
    ("description: x\nexpect: {decision: act, summary_has: s}\n", "a list of strings"),
    ("expect: {decision: act, summary: s}\n", "`description`"),
    ("description: x\nexpect: {decision: act, summary: s}\nrelease: {id: bbbbbbbbbbbb}\n",
     "KeyError"),
    ("description: x\nexpect: {decision: act, summary: s}\nfacts: {digests: {a: '@sha256:x'}}\n",
     "@sha256:supervisor"),
])
def test_a_malformed_case_names_its_file(tmp_path: Path, text: str, says: str) -> None:
    path = tmp_path / "upload" / "broken-case.yaml"
    path.parent.mkdir()
    path.write_text(text)
    with pytest.raises(CaseError, match=r"broken-case\.yaml: ") as raised:
        run_case(path, tmp_path)
    assert says in str(raised.value)
