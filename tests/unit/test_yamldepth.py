"""A YAML file nested past the bound is refused from its text, before ruamel parses it
(its scanner spends seconds on a thousand levels): flow and block nesting, every loader."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from rollout.config import yamlfile
from rollout.config.playbook import parse_set_options
from rollout.config.yamldepth import MAX_VALUE_DEPTH, too_deep
from rollout.errors import ConfigError


class ParserSpy:
    """Stands in for ruamel's YAML class and counts the parsers made."""

    made = 0

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        type(self).made += 1
        raise AssertionError("ruamel's parser was called for a file refused by its text")


def block_lines(levels: int) -> str:
    return "".join(" " * level + f"k{level}:\n" for level in range(levels))


DEEP = {
    "flow-1000": "v: " + "[" * 1000 + "]" * 1000 + "\n",
    "flow-100000": "v: " + "{a: " * 100_000 + "1" + "}" * 100_000 + "\n",
    "block-1000": block_lines(1000),
    "block-100000": "v:\n" + "- " * 100_000 + "x\n",
    "mixed": block_lines(20) + " " * 20 + "v: " + "[" * 20 + "]" * 20 + "\n",
}


@pytest.mark.parametrize("name", sorted(DEEP))
def test_a_deep_file_is_refused_before_parsing(
    name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(yamlfile, "YAML", ParserSpy)
    path = tmp_path / f"{name}.yaml"
    path.write_text(DEEP[name])
    with pytest.raises(ConfigError) as err:
        yamlfile.load_yaml(path, "playbook")
    assert ParserSpy.made == 0
    assert err.value.exit_code == 2
    assert err.value.location is not None and err.value.location.file == str(path)
    assert err.value.location.line is not None
    assert f"nested deeper than {MAX_VALUE_DEPTH} levels" in err.value.message


def test_the_refusal_names_the_line_where_the_bound_is_passed(tmp_path: Path) -> None:
    path = tmp_path / "deep.yaml"
    path.write_text("a: 1\nb: 2\n" + block_lines(40))
    with pytest.raises(ConfigError, match=rf"deep.yaml:{2 + MAX_VALUE_DEPTH + 2}: "):
        yamlfile.load_yaml(path, "inventory")


def test_a_set_file_that_is_too_deep_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(yamlfile, "YAML", ParserSpy)
    path = tmp_path / "vars.yaml"
    path.write_text("v: " + "[" * 1000 + "]" * 1000 + "\n")
    with pytest.raises(ConfigError, match="nested deeper than"):
        parse_set_options([f"@{path}"])
    assert ParserSpy.made == 0


def test_a_deep_but_legal_file_loads(tmp_path: Path) -> None:
    """Nesting near the bound; brackets in quotes, comments, plain text and a block
    scalar (deeply indented script text) are text, not nesting."""
    text = (
        block_lines(20)
        + " " * 20
        + "v: [1, {a: 'x[[[[ it''s', b: \"y{{{\\\"[\"}]  # [[[[[[[[[[\n"
        + " " * 20
        + "w: echo a[1] {{ x }} {{{{\n"
        + " " * 20
        + "run: |\n"
        + "".join(" " * (22 + 2 * i) + "if [ x ]; then {\n" for i in range(200))
        + " " * 20
        + "after: "
        + "[" * 10
        + "]" * 10
        + "\n"
    )
    path = tmp_path / "legal.yaml"
    path.write_text(text)
    doc = yamlfile.load_yaml(path, "playbook")
    node = doc.root
    for level in range(19):
        node = node[f"k{level}"]
    assert node["k19"]["v"][1] == {"a": "x[[[[ it's", "b": 'y{{{"['}
    assert node["k19"]["run"].count("\n") == 200


def test_the_same_bound_as_the_values_check() -> None:
    assert too_deep("v: " + "[" * MAX_VALUE_DEPTH) is None
    assert too_deep("v: " + "[" * (MAX_VALUE_DEPTH + 1)) == 1
    assert too_deep("- " * (MAX_VALUE_DEPTH + 1) + "x") is None
    assert too_deep("- " * (MAX_VALUE_DEPTH + 2) + "x") == 1


def test_what_the_text_check_lets_through_the_values_check_accepts(tmp_path: Path) -> None:
    """At the bound exactly, the parsed values pass plain_value (no gap between the two)."""
    path = tmp_path / "vars.yaml"
    path.write_text("v: " + "[" * MAX_VALUE_DEPTH + "]" * MAX_VALUE_DEPTH + "\n")
    assert parse_set_options([f"@{path}"])["v"] is not None
    path.write_text("v: " + "[" * (MAX_VALUE_DEPTH + 1) + "]" * (MAX_VALUE_DEPTH + 1) + "\n")
    with pytest.raises(ConfigError, match=f"nested deeper than {MAX_VALUE_DEPTH} levels"):
        parse_set_options([f"@{path}"])
