"""Values never become shell text, by rule; no value is an option by accident; env names by
allowlist (issue 28)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from rollout.commands.app import load_fleet
from rollout.config.inventory import Host
from rollout.config.playbook import RESERVED_NAMES
from rollout.config.render import render_command
from rollout.config.sections import ValidateSpec
from rollout.config.shell_rule import RUNTIME_NAMES, SECTIONS, argv_spelling
from rollout.errors import ConfigError
from rollout.steps.kinds import load_playbook

PLAYBOOK = """\
name: test
vars: {v: plain, w: "{{ v }}-x", listen: "127.0.0.1:9820", root: /data}
release: {executables: [cuzk-daemon], root: "{{ root }}"}
daemon: {listen: "{{ listen }}"}
validate:
  input: {path: /data/c1.json}
  command: COMMAND
ENV
steps:
  - {name: validate, kind: validate}
"""
FLEET = """\
defaults:
  known_hosts: known_hosts
hosts:
  - name: lab-1
    address: 127.0.0.1
    vars: {VARS}
"""
SPELLINGS = [
    "echo {{ v }} | bash",
    "printf '%s' {{ v }} | sh",
    "echo x | xargs -I{} sh -c 'echo {} {{ v }}'",
    "trap 'echo {{ v }}' EXIT; true",
    "echo {{ v }}",
    "/bin/echo '{{ v }}'",
    "cat <<< {{ v }}",
    "echo {{ v | raw }}",
    "env X={{ v }} true",
]
HOSTILE = "$(touch {d}/pwned);`touch {d}/pwned2`'\"; touch {d}/pwned3 {{{{ 7 * 7 }}}}"


def playbook(tmp_path: Path, command: str, env: str = "") -> Path:
    path = tmp_path / "play.yaml"
    text = PLAYBOOK.replace("COMMAND", command).replace("ENV\n", env and f"  env: {env}\n")
    path.write_text(text)
    return path


def quoted(command: str) -> str:
    return "'" + command.replace("'", "''") + "'"


def refused(path: Path, sets: dict[str, str]) -> str:
    with pytest.raises(ConfigError) as info:
        load_playbook(path, sets, builds=False)
    where = info.value.location
    assert where is not None and (where.file, where.line) == (str(path), 7)
    assert where.key is not None and where.key.startswith("validate.command")
    return info.value.message


@pytest.mark.parametrize("command", SPELLINGS)
def test_a_set_value_in_any_shell_string_is_refused_at_load(tmp_path: Path, command: str) -> None:
    message = refused(playbook(tmp_path, quoted(command)), {"v": "x"})
    assert "uses `v`, a value from outside the playbook (v <- --set)" in message
    assert "env: {V: '{{ v }}'}" in message  # the spelling that takes it
    assert load_playbook(playbook(tmp_path, quoted(command)), builds=False)  # its own value


@pytest.mark.parametrize("command", SPELLINGS[:4])
def test_an_inventory_value_in_a_shell_string_is_refused_for_its_host(
    tmp_path: Path, command: str
) -> None:
    playbook(tmp_path, quoted(command))
    (tmp_path / "fleet.yaml").write_text(FLEET.replace("VARS", "v: x"))
    with pytest.raises(ConfigError) as info:
        load_fleet(str(tmp_path / "fleet.yaml"), str(tmp_path / "play.yaml"))
    assert "(for host lab-1)" in info.value.message
    assert "v <- the inventory" in info.value.message
    where = info.value.location
    assert where is not None and (where.file, where.line) == (str(tmp_path / "play.yaml"), 7)


@pytest.mark.parametrize(
    ("command", "sets", "why"),
    [
        ("echo {{ w }}", {"v": "x"}, "w <- v <- --set"),  # a var that uses one, transitively
        ("echo {{ daemon.listen }}", {"listen": "10.0.0.1:1"}, "daemon.listen <- listen <- --set"),
        ("{{ release_dir }}/b", {"root": "/x"}, "release_dir <- release.root <- root <- --set"),
        ("echo {{ host.name }}", {}, "host.name <- the inventory"),
        ("echo {{ v | default('') }}", {"v": "x"}, "v <- --set"),  # guarded: used all the same
    ],
)
def test_what_makes_a_value_outside(
    tmp_path: Path, command: str, sets: dict[str, str], why: str
) -> None:
    assert f"({why})" in refused(playbook(tmp_path, quoted(command)), sets)


def test_constants_and_computed_paths_stay_in_shell_strings(tmp_path: Path) -> None:
    command = "cd {{ release_dir }} && ./b {{ release_id }} {{ daemon.listen }} {{ w }} | tail -1"
    sets = {"unrelated": "x"}
    assert load_playbook(playbook(tmp_path, quoted(command)), sets, builds=False)


def test_every_name_of_the_runtime_context_is_classified() -> None:
    """The engine adds host, release_dir and release_id to the vars and the sections."""
    assert {"host", "release_dir", "release_id"} <= set(RUNTIME_NAMES)
    assert set(RUNTIME_NAMES) | SECTIONS >= RESERVED_NAMES
    loaded = load_playbook(builds=False)
    assert set(loaded.template_context()) - set(loaded.vars) <= SECTIONS


def test_the_refusal_shows_the_argv_spelling(tmp_path: Path) -> None:
    message = refused(playbook(tmp_path, quoted("/bin/tool --c1 {{ v }} -x")), {"v": "x"})
    assert 'command: ["/bin/tool", "--c1", "{{ v }}", "-x"]' in message
    assert argv_spelling("a | b {{ v }}") is None and argv_spelling("echo $HOME {{ v }}") is None


def test_a_work_command_is_held_to_the_rule(tmp_path: Path) -> None:
    path = playbook(tmp_path, "'true'")
    path.write_text(path.read_text().replace(
        "steps:", "work: {cordon: 'curio cordon {{ v }}', uncordon: 'curio uncordon'}\nsteps:"))
    with pytest.raises(ConfigError, match="work.cordon: this shell command line uses `v`"):
        load_playbook(path, {"v": "x"}, builds=False)


def run_sh(line: str) -> str:
    return subprocess.run(["sh", "-c", line], capture_output=True, text=True, check=True).stdout


def test_the_argv_and_env_spellings_carry_a_set_value_byte_for_byte(tmp_path: Path) -> None:
    value = HOSTILE.format(d=tmp_path)
    command = "[sh, -c, 'printf %s \"$1\"; printf \"|%s\" \"$V\"', _, '{{ v }}']"
    loaded = load_playbook(playbook(tmp_path, command, "{V: '{{ v }}'}"), {"v": value},
                           builds=False)
    context = loaded.template_context(release_dir="/d", release_id="r1")
    line = render_command(loaded.validation.command, loaded.validation.env, context)
    assert run_sh(line) == f"{value}|{value}"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["play.yaml"]


@pytest.mark.parametrize(
    "command",
    [
        "[python3, '{{ v }}']",
        "[sh, -c, 'python3 \"$1\"', _, '{{ v }}']",  # the documented spelling, held to it
        "['{{ release_dir }}/b', '{{ w }}']",
    ],
)
def test_a_set_value_that_starts_with_a_dash_is_refused_as_an_argv_item(
    tmp_path: Path, command: str
) -> None:
    message = refused(playbook(tmp_path, command), {"v": "-cimport os"})
    assert "starts with '-'" in message and "'{{ v | option }}'" in message
    assert "v <- --set" in message


def test_a_declared_option_and_a_dash_inside_an_item_are_fine(tmp_path: Path) -> None:
    command = "[tool, '{{ v | option }}', '--c1={{ v }}', --, 'x{{ w }}']"
    assert load_playbook(playbook(tmp_path, command), {"v": "-v"}, builds=False)


def test_an_env_value_that_starts_with_a_dash_is_refused(tmp_path: Path) -> None:
    path = playbook(tmp_path, "'tool \"$V\"'", "{V: '{{ v }}'}")
    with pytest.raises(ConfigError, match="starts with '-'") as info:
        load_playbook(path, {"v": "-x"}, builds=False)
    assert info.value.location is not None and info.value.location.key == "validate.env.V"


def test_an_inventory_dash_value_is_refused_for_its_host(tmp_path: Path) -> None:
    playbook(tmp_path, "[tool, '{{ v }}']")
    (tmp_path / "fleet.yaml").write_text(FLEET.replace("VARS", "v: '-x'"))
    with pytest.raises(ConfigError, match="starts with '-'"):
        load_fleet(str(tmp_path / "fleet.yaml"), str(tmp_path / "play.yaml"))


def test_a_dash_value_known_only_when_rendered_fails_there() -> None:
    """`host` and what a host answered are known only when the step renders its command:
    the render refuses (the step fails with the reason), the command never runs."""
    host = Host("h1", "127.0.0.1", 22, "root", None, Path("/k"), "strict", 10, (), {"a": "-e"})
    context = {"host": host.as_context()}
    with pytest.raises(ConfigError, match="starts with '-'"):
        render_command(["tool", "{{ host.vars.a }}"], {}, context)
    with pytest.raises(ConfigError, match="starts with '-'"):
        render_command("true", {"V": "{{ host.vars.a }}"}, context)
    assert render_command(["tool", "{{ host.vars.a | option }}"], {}, context) == "tool -e"
    assert render_command(["tool", "-{{ host.vars.a }}"], {}, context) == "tool --e"


@pytest.mark.parametrize(
    "name",
    ["LUA_INIT", "RUBYLIB", "NODE_PATH", "_JAVA_OPTIONS", "OPENSSL_CONF", "GIT_SSH_COMMAND",
     "LESSOPEN", "PAGER", "ZDOTDIR", "PATH", "LD_PRELOAD", "PYTHONPATH", "BASH_ENV",
     "PERL5LIB", "CLASSPATH", "EDITOR", "SSH_ASKPASS", "GOPATH", "PHPRC", "ld_preload"],
)
def test_env_names_a_runtime_reads_as_code_are_refused(tmp_path: Path, name: str) -> None:
    with pytest.raises(ConfigError, match="read as code|starting with a letter"):
        load_playbook(playbook(tmp_path, "'true'", f"{{{name}: x}}"), builds=False)


@pytest.mark.parametrize("name", ["V", "HOSTILE", "SECTOR_NUM", "CUZK_INPUT", "RUST_LOG"])
def test_env_names_of_the_playbooks_own_load(tmp_path: Path, name: str) -> None:
    assert load_playbook(playbook(tmp_path, "'true'", f"{{{name}: x}}"), builds=False)


def test_env_names_are_written_in_the_playbook_never_a_value(tmp_path: Path) -> None:
    with pytest.raises(ConfigError):
        load_playbook(playbook(tmp_path, "'true'", "'{{ e }}'"), {"e": "{PAGER: x}"},
                      builds=False)


def test_the_built_in_playbooks_take_set_values_as_argv_items() -> None:
    from rollout.config.playbook import DEFAULT_PLAYBOOK, LAB_PLAYBOOK

    sets = {"version": "v1", "c1_sector_num": "7", "c1_miner_id": "1001; touch /tmp/x"}
    for path in (DEFAULT_PLAYBOOK, LAB_PLAYBOOK):
        assert isinstance(load_playbook(path, sets, builds=False).validation.command, list)
    assert isinstance(ValidateSpec().command, list)
