"""Templates: one sandbox, rendered once, commands quoted word by word, checked at load."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from rollout.config.inventory import Host
from rollout.config.playbook import parse_set_options
from rollout.config.render import render_command, render_shell, render_value
from rollout.errors import ConfigError, Location
from rollout.steps.kinds import load_playbook

PLAYBOOK = """\
name: test
vars:
  version: v1
  tag: t1
build:
  dockerfile: Dockerfile
  context: .
  image_paths: {cuzk-daemon: /bin/d, cuzk-bench: /bin/b}
validate:
  command: "{{ release_dir }}/cuzk-bench --tag {{ tag }}"
steps:
  - {name: build, kind: build}
  - name: validate
    kind: validate
    params: {command: "echo {{ tag }}"}
    when: "version != 'v0'"
"""


ARGV_PLAYBOOK = PLAYBOOK.replace(
    '"{{ release_dir }}/cuzk-bench --tag {{ tag }}"',
    '["{{ release_dir }}/cuzk-bench", --tag, "{{ tag }}"]',
).replace('{command: "echo {{ tag }}"}', '{command: [echo, "{{ tag }}"]}')
"""Its commands as argv lists: the spelling that takes a --set value (issue 28)."""


def write(tmp_path: Path, text: str = PLAYBOOK) -> Path:
    (tmp_path / "Dockerfile").touch()
    path = tmp_path / "play.yaml"
    path.write_text(text)
    return path


def host(**vars: object) -> Host:
    return Host("lab-1", "127.0.0.1", 22001, "root", None, Path("/k"), "strict", 10, ("lab",), vars)


def bash(command: str) -> str:
    done = subprocess.run(["bash", "-c", command], capture_output=True, text=True, check=True)
    return done.stdout


def location_of(exc: pytest.ExceptionInfo[ConfigError]) -> tuple[str, int | None, str | None]:
    where = exc.value.location
    assert isinstance(where, Location)
    return Path(where.file).name, where.line, where.key


def test_a_set_value_is_never_rendered_again(tmp_path: Path) -> None:
    marker = tmp_path / "pwned"
    payload = f"{{{{ cycler.__init__.__globals__.os.popen('touch {marker}').read() }}}}"
    playbook = load_playbook(write(tmp_path, ARGV_PLAYBOOK), parse_set_options([f"tag={payload}"]))
    per_host = playbook.for_host(host())
    context = per_host.template_context(host(), release_dir="/d")
    command = render_command(per_host.step("validate").params["command"], {}, context)
    assert not marker.exists()
    assert bash(command).strip() == payload


def test_the_sandbox_refuses_python_internals(tmp_path: Path) -> None:
    text = PLAYBOOK.replace("tag: t1", "tag: \"{{ cycler.__init__.__globals__ }}\"")
    with pytest.raises(ConfigError, match="unsafe") as info:
        load_playbook(write(tmp_path, text))
    assert location_of(info) == ("play.yaml", 4, "vars.tag")


@pytest.mark.parametrize(
    "written", ["{{ v }}", "'{{ v }}'", '"{{ v }}"', "x{{ v }}y", "'a b'{{ v }}"]
)
@pytest.mark.parametrize("value", ["$(touch MARK)", "`touch MARK`", "it's", 'a"b', "x; touch MARK"])
def test_quoting_holds_whatever_quotes_surround_a_placeholder(
    tmp_path: Path, written: str, value: str
) -> None:
    marker = tmp_path / "MARK"
    value = value.replace("MARK", str(marker))
    out = bash(render_shell(f"printf %s {written}", {"v": value}))
    assert not marker.exists()
    expected = written.replace("'", "").replace('"', "").replace("{{ v }}", value)
    assert out == expected


def test_words_without_placeholders_and_operators_stay_as_written() -> None:
    template = "a 'b c' \"$HOME\" {{ v }} 2>&1 | tail -n 1; x && y"
    expected = "a 'b c' \"$HOME\" 'q r' 2>&1 | tail -n 1; x && y"
    assert render_shell(template, {"v": "q r"}) == expected


def test_raw_is_the_one_opt_out_and_takes_a_word_of_its_own() -> None:
    assert render_shell("a {{ p | raw }} b", {"p": "| tail -n 1"}) == "a | tail -n 1 b"
    with pytest.raises(ConfigError, match="only raw values"):
        render_shell("a {{ p | raw }}{{ q }}", {"p": "x", "q": "y"})


def test_a_secret_with_a_quote_stays_one_word(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ROLLOUT_TEST_QUOTE", "pa'ss word")
    command = render_shell("printf %s '{{ secret(\"ROLLOUT_TEST_QUOTE\") }}'", {})
    assert bash(command) == "pa'ss word"


def test_single_expression_keeps_its_type() -> None:
    assert render_value("{{ n }}", {"n": [1, 2]}) == [1, 2]
    assert render_value("{{ n }}", {"n": "1.0"}) == "1.0"
    assert render_value("n={{ n }}", {"n": 3}) == "n=3"


@pytest.mark.parametrize(
    ("old", "new", "line", "key"),
    [
        ("version != 'v0'", "versio != 'v0'", 16, "steps[1].when"),
        ("echo {{ tag }}", "echo {{ tga }}", 15, "steps[1].params.command"),
        ("--tag {{ tag }}", "--tag {{ tga }}", 10, "validate.command"),
    ],
)
def test_undefined_names_in_runtime_templates_fail_at_load(
    tmp_path: Path, old: str, new: str, line: int, key: str
) -> None:
    playbook = load_playbook(write(tmp_path, PLAYBOOK.replace(old, new)))
    with pytest.raises(ConfigError, match="undefined name") as info:
        playbook.for_host(host())
    assert location_of(info) == ("play.yaml", line, key)
    if key.endswith("when"):
        assert playbook.for_host(host(versio="v1"))  # a host var defines it
    else:  # a host var defines it, but a shell string takes no inventory value (issue 28)
        with pytest.raises(ConfigError, match="from outside the playbook"):
            playbook.for_host(host(tga="x"))


def test_config_template_names_are_checked_at_load(tmp_path: Path) -> None:
    (tmp_path / "cuzk.toml.j2").write_text("[memory]\ntotal_budget = {{ total_budget }}\n"
                                           "x = {{ nope }}\n")
    text = PLAYBOOK.replace("validate:\n", "daemon: {config_template: cuzk.toml.j2}\nvalidate:\n")
    playbook = load_playbook(write(tmp_path, text))
    with pytest.raises(ConfigError, match="nope") as info:
        playbook.for_host(host())
    assert location_of(info) == ("cuzk.toml.j2", 3, None)


def test_a_set_name_no_template_uses_gets_a_warning(tmp_path: Path) -> None:
    sets = parse_set_options(["tga=x", "tag=y", "version=2"])
    playbook = load_playbook(write(tmp_path, ARGV_PLAYBOOK), sets)
    assert len(playbook.warnings) == 1
    assert "--set tga" in playbook.warnings[0]


def test_the_lab_validation_passes_the_c1_sector_and_miner_ids_as_data() -> None:
    from rollout.config.playbook import LAB_PLAYBOOK

    sets = parse_set_options(["c1_sector_num=7", "c1_miner_id=1001; touch /tmp/x"])
    per_host = load_playbook(LAB_PLAYBOOK, sets).for_host(host())
    context = per_host.template_context(host(), release_dir="/d")
    command = render_command(per_host.validation.command, per_host.validation.env, context)
    assert command.endswith("--sector-num 7 --miner-id '1001; touch /tmp/x'")
