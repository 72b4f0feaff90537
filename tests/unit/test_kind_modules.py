"""A host step kind is one module of rollout.steps.kinds exporting one record (KIND): its
params, its place in the order, its decide, its apply and its undo; everything reads KINDS."""

from __future__ import annotations

import pkgutil
import re
from pathlib import Path
from types import SimpleNamespace

import pytest

from rollout.config.playbook import parse_set_options
from rollout.engine.hostplan import RULES
from rollout.errors import ConfigError
from rollout.host.facts import HostFacts
from rollout.steps import kinds as kinds_pkg
from rollout.steps.daemon import cannot_adopt
from rollout.steps.kinds import KINDS, UNDONE, load_playbook, preflight
from rollout.steps.preflight_inputs import Look

REPO = Path(__file__).resolve().parents[2]
SETS = ("params_files=[]", "pce_bytes=0")
OFF = {"work.cordon": None, "work.uncordon": None}


def lab_text() -> str:
    """The lab playbook, its relative paths made absolute (it is loaded from tmp_path)."""
    text = (REPO / "playbooks" / "lab.yaml").read_text()
    text = text.replace("../dockerfiles", str(REPO / "dockerfiles"))
    text = text.replace("source: files/c1.json", f"source: {REPO}/playbooks/files/c1.json")
    return text.replace("params_source: files/", f"params_source: {REPO}/playbooks/files/")


def without_steps(text: str) -> str:
    """The playbook with its `steps` section cut (it is the file's last section)."""
    return text[:text.index("\nsteps:")] + "\n"


def load(tmp_path: Path, text: str, builds: bool = True):  # type: ignore[no-untyped-def]
    path = tmp_path / "playbook.yaml"
    path.write_text(text)
    return load_playbook(path, overrides=parse_set_options(SETS), settings=OFF, builds=builds)


def test_every_kind_is_the_module_of_its_name_found_without_a_list() -> None:
    modules = {m.name for m in pkgutil.iter_modules(kinds_pkg.__path__)}
    assert set(KINDS) == modules
    assert [k.place for k in KINDS.values()] == sorted(k.place for k in KINDS.values())
    assert {name: kind.rule for name, kind in KINDS.items()} == RULES


def test_the_rollbacks_kinds_are_those_with_an_undo_in_the_standard_order() -> None:
    assert UNDONE == ("stop", "drain", "switch", "start", "ready", "validate")


def test_a_playbook_without_steps_runs_the_standard_order(tmp_path: Path) -> None:
    playbook = load(tmp_path, without_steps(lab_text()))
    assert [(s.name, s.kind) for s in playbook.steps] == [
        (k, k) for k in ("build", "extract", *KINDS)]
    assert list(KINDS) == ["preflight", "supervise", "upload", "stop", "drain", "config",
                           "switch", "start", "ready", "preload", "validate", "prune"]
    assert not [w for w in playbook.warnings if "steps" in w]  # no order correction


def test_a_playbook_without_steps_or_build_runs_the_host_kinds(tmp_path: Path) -> None:
    text = re.sub(r"\nbuild:\n(  .*\n|\n)*", "\n", without_steps(lab_text()))
    assert "\nbuild:" not in text
    playbook = load(tmp_path, text, builds=False)
    assert [s.kind for s in playbook.steps] == list(KINDS)


def test_empty_preflight_checks_load_with_a_warning_that_every_check_runs(
    tmp_path: Path,
) -> None:
    text = lab_text().replace("- {name: preflight, kind: preflight}",
                              "- {name: preflight, kind: preflight, params: {checks: []}}")
    playbook = load(tmp_path, text)
    [warning] = [w for w in playbook.warnings if "checks" in w]
    line = next(i for i, x in enumerate(text.splitlines(), 1) if "checks: []" in x)
    assert warning.startswith(f"{tmp_path / 'playbook.yaml'}:{line}: steps[2].params.checks: ")
    assert "an empty list runs every check; name at least one check, or remove the step" in (
        warning)


def test_an_unknown_kind_names_the_closest(tmp_path: Path) -> None:
    text = lab_text().replace("kind: switch}", "kind: swtich}")
    with pytest.raises(ConfigError) as raised:
        load(tmp_path, text)
    assert "unknown step kind 'swtich' (did you mean 'switch'?)" in raised.value.message
    assert raised.value.location is not None and raised.value.location.key == "steps[9].kind"


def test_preflight_refuses_by_name_the_adoption_the_stop_refuses() -> None:
    """A foreign daemon whose start time the host did not report: preflight does not say
    "will adopt" (the stop would refuse it): both refuse it in the same words."""
    facts = HostFacts.parse({"cuzk_processes": [
        {"pid": 5000, "supervised": False, "starttime": "900", "state": "running"}]})
    ctx = SimpleNamespace(settings=SimpleNamespace(preflight=SimpleNamespace(adopt=True)))
    notes: list[str] = []
    problems = preflight.check_ownership(Look(ctx, facts), notes)  # type: ignore[arg-type]
    [daemon] = facts.foreign_daemons
    assert problems == [cannot_adopt(daemon)] and not notes
    assert problems[0].startswith("cannot adopt daemon pid 5000 ")
