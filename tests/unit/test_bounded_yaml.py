"""Issue 28: every YAML file (inventory, group_vars, host_vars, playbook, `--set @FILE`) is
held to one cap on its values counted with aliases expanded, so an alias bomb fails in the
time its text takes to read; a merge key (`<<: *base`) works and names its lines; a vars
file's errors never quote its text, whatever file it is."""

from __future__ import annotations

import tracemalloc
from pathlib import Path

import pytest

from rollout.commands.inventory_view import describe
from rollout.config.inventory import load_inventory
from rollout.config.playbook import parse_set_options
from rollout.config.yamlfile import MAX_VALUE_NODES, load_yaml
from rollout.errors import ConfigError

# Ten levels of nine aliases to the level below: 9**10 values, about 3.5 billion.
BOMB = 'a0: &a0 ["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]\n' + "".join(
    f"a{n}: &a{n} [{', '.join([f'*a{n - 1}'] * 9)}]\n" for n in range(1, 10))
SECRET = "root:$6$SALT$SECRETHASH:19000:0:99999:7:::"


def inventory(tmp_path: Path, files: dict[str, str]) -> Path:
    tmp_path.mkdir(exist_ok=True)
    (tmp_path / "hosts").write_text("[gpu]\nh1 ansible_host=10.0.0.1\n")
    for name, text in files.items():
        path = tmp_path / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return tmp_path / "hosts"


@pytest.fixture(autouse=True)
def no_home_config(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HOME", str(tmp_path / "home"))


@pytest.mark.timeout(10)
def test_an_alias_bomb_in_group_vars_is_refused_at_its_line_in_bounded_memory(
    tmp_path: Path,
) -> None:
    path = inventory(tmp_path, {"group_vars/gpu.yml": BOMB})
    tracemalloc.start()
    try:
        with pytest.raises(ConfigError) as info:
            load_inventory(path)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 32 << 20
    assert info.value.location is not None
    assert (info.value.location.file, info.value.location.line) == (
        str(tmp_path / "group_vars/gpu.yml"), 6)  # a5: 9**6 values, the first past the cap
    assert f"more than {MAX_VALUE_NODES:,} values, its aliases expanded" in str(info.value)


@pytest.mark.timeout(10)
@pytest.mark.parametrize("name", ["playbook.yaml", "fleet.yaml", "vars.yaml"])
def test_an_alias_bomb_is_refused_in_every_yaml_file(tmp_path: Path, name: str) -> None:
    (tmp_path / name).write_text(BOMB)
    with pytest.raises(ConfigError, match="more than"):
        load_yaml(tmp_path / name, name.split(".")[0])


def test_aliases_nested_past_the_depth_cap_are_refused(tmp_path: Path) -> None:
    chain = "a0: &a0 [1]\n" + "".join(f"a{n}: &a{n} [*a{n - 1}]\n" for n in range(1, 40))
    (tmp_path / "vars.yaml").write_text(chain)
    with pytest.raises(ConfigError, match="nested deeper than 32 levels, its aliases expanded"):
        parse_set_options([f"@{tmp_path / 'vars.yaml'}"])


def test_a_few_aliases_below_the_cap_still_load(tmp_path: Path) -> None:
    (tmp_path / "vars.yaml").write_text("base: &b {x: 1, y: [1, 2]}\none: *b\ntwo: *b\n")
    got = parse_set_options([f"@{tmp_path / 'vars.yaml'}"])
    assert got["one"] == got["two"] == {"x": 1, "y": [1, 2]}


@pytest.mark.parametrize("text", [
    "base: &b\n  x: 1\n<<: *b\ny: 2\n",  # at the top: exit 70 before issue 28
    "base: &b\n  x: 1\ny: 2\nz:\n  <<: [*b]\n",
])
def test_a_merge_key_in_group_vars_works_and_names_its_lines(tmp_path: Path, text: str) -> None:
    path = inventory(tmp_path, {"group_vars/gpu.yml": text})
    host = load_inventory(path).hosts[0]
    merged = host.vars.get("z", host.vars)
    assert merged["x"] == 1
    sources = describe(str(path)).hosts["h1"]["sources"]
    assert all(str(tmp_path / "group_vars/gpu.yml") in where
               for key, where in sources.items() if key.startswith("vars."))


def test_group_vars_linked_out_of_the_inventory_folder_are_refused_unquoted(
    tmp_path: Path,
) -> None:
    (tmp_path / "shadow").write_text(SECRET + "\n")
    path = inventory(tmp_path / "inv", {})
    (tmp_path / "inv/group_vars").mkdir()
    (tmp_path / "inv/group_vars/all.yml").symlink_to(tmp_path / "shadow")
    with pytest.raises(ConfigError, match="leads out of") as info:
        load_inventory(path)
    assert "SECRET" not in str(info.value)


@pytest.mark.parametrize("text", [
    SECRET + "\ndaemon:*:19000:0:99999:7:::\n",  # /etc/shadow itself: a plain text
    f"a: 1\na: {SECRET}\n",  # a duplicate key: ruamel quotes the key and both values
    f'a: "{SECRET}\\q"\n',  # a bad escape: ruamel quotes the character
    f"a: [{SECRET}\n",
    f"a: *{SECRET.split(':')[1]}\n",  # an undefined alias: ruamel quotes its name
    f'"{SECRET}": 1\n',  # a key that is no variable name
    f"a: 1\n\t{SECRET}\n",
    f"{SECRET}\n  - x\n",
])
def test_a_vars_file_error_never_quotes_the_file(tmp_path: Path, text: str) -> None:
    path = tmp_path / "shadow"
    path.write_text(text)
    with pytest.raises(ConfigError) as info:
        parse_set_options([f"@{path}"])
    assert str(path) in str(info.value)
    assert "SECRET" not in str(info.value) and "SALT" not in str(info.value)


def test_a_yaml_error_keeps_its_line_and_its_punctuation(tmp_path: Path) -> None:
    (tmp_path / "vars.yaml").write_text("a: 1\nb: [1, 2\n")
    with pytest.raises(ConfigError) as info:
        parse_set_options([f"@{tmp_path / 'vars.yaml'}"])
    assert info.value.location is not None and info.value.location.line == 3
    assert "expected ',' or ']'" in info.value.message
