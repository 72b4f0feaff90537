"""The layers and the ban on import cycles (pyproject.toml's [tool.importlinter]) hold, and
every part of the package has its layer: a new package or top-level module that the layers
contract does not name would be checked for cycles only, not for the direction of its imports.
`./dev test` also runs `lint-imports` itself."""

from __future__ import annotations

import pkgutil
import tomllib
from pathlib import Path

import pytest

import rollout

importlinter_cli = pytest.importorskip("importlinter.cli")  # the dev extra

PYPROJECT = Path(__file__).resolve().parents[2] / "pyproject.toml"


def _contracts() -> list[dict[str, object]]:
    config = tomllib.loads(PYPROJECT.read_text())["tool"]["importlinter"]
    assert config["root_package"] == "rollout"
    return list(config["contracts"])


def _layered() -> set[str]:
    (layers,) = [c for c in _contracts() if c["type"] == "layers"]
    assert layers["containers"] == ["rollout"]
    names: set[str] = set()
    for layer in layers["layers"]:  # type: ignore[attr-defined]
        names.update(part.strip() for part in str(layer).replace(":", "|").split("|"))
    return names


def test_every_package_and_module_of_rollout_has_a_layer() -> None:
    children = {info.name for info in pkgutil.iter_modules(rollout.__path__)}
    assert children, "rollout's children were not found"
    assert children - _layered() == set(), "give each a layer in pyproject.toml"
    assert _layered() - children == set(), "a layer names a module rollout does not have"


def test_cycles_are_banned_across_the_whole_package() -> None:
    (acyclic,) = [c for c in _contracts() if c["type"] == "acyclic_siblings"]
    assert acyclic["ancestors"] == ["rollout"]
    assert "ignore_imports" not in acyclic and "skip_descendants" not in acyclic


def test_the_contracts_are_kept(capsys: pytest.CaptureFixture[str]) -> None:
    from importlinter.application import use_cases

    kept = use_cases.lint_imports(config_filename=str(PYPROJECT), no_logo=True)
    report = capsys.readouterr().out
    assert kept, report
    assert "2 kept, 0 broken" in report
