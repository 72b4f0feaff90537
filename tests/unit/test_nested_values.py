"""Values never become code, at any depth (issue 18): nested interpreters refused at load,
argv-list commands and `env:` values inert, inventory values kept out of what runs,
`when` values as booleans, control characters refused, weak secrets refused."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from conftest import CliRunner

from rollout.commands.app import load_fleet
from rollout.config.playbook import parse_set_options
from rollout.config.render import as_condition, evaluate_condition, render_command
from rollout.errors import ConfigError, UserError
from rollout.secrets import redact, secret
from rollout.steps.kinds import load_playbook

PLAYBOOK = """\
name: test
vars: {v: plain, c: "yes", daemon_launcher: ""}
release: {executables: [cuzk-daemon]}
validate:
  input: {path: /data/c1.json}
  command: COMMAND
steps:
  - {name: supervise, kind: supervise, params: {launcher: "{{ daemon_launcher }}"}}
  - {name: validate, kind: validate, when: "{{ c }}"}
"""
FLEET = """\
defaults:
  known_hosts: known_hosts
hosts:
  - name: lab-1
    address: 127.0.0.1
    vars:
      VARS
"""
HOSTILE = "$(touch {d}/pwned);`touch {d}/pwned2`'\"; touch {d}/pwned3"


def playbook(tmp_path: Path, command: str) -> Path:
    path = tmp_path / "play.yaml"
    path.write_text(PLAYBOOK.replace("COMMAND", command))
    return path


def refused(tmp_path: Path, command: str, sets: dict[str, str] | None = None) -> ConfigError:
    path = playbook(tmp_path, command)
    with pytest.raises(ConfigError) as info:
        load_playbook(path, sets, builds=False)
    assert info.value.location is not None and info.value.location.file == str(path)
    assert info.value.location.line == 6 and info.value.location.key == "validate.command"
    return info.value


NESTED = [
    "sh -c 'echo {{ v }}'",
    "bash -c \"echo {{ v }}\"",
    "dash -ec '{{ v }}'",
    "zsh -c {{ v }}",
    "/bin/sh -c 'x=1; echo {{ v }}'",
    "sudo bash -lc 'echo {{ v }}'",
    "eval echo {{ v }}",
    "python -c 'print(\"{{ v }}\")'",
    "python3 -c 'print(\"{{ v }}\")'",
    "/usr/bin/env python3 -c '{{ v }}'",
    "perl -e 'print \"{{ v }}\"'",
    "awk '{print \"{{ v }}\"}'",
    "echo `echo {{ v }}`",
    "echo $(echo {{ v }})",
    "echo \"$(echo {{ v }})\"",
    "ssh other echo {{ v }}",
    "true | sh -c \"{{ v }}\"",
    "[sh, -c, 'echo {{ v }}']",
    "[python3, -c, 'print(\"{{ v }}\")']",
]


@pytest.mark.parametrize("command", NESTED)
def test_a_placeholder_a_nested_interpreter_reads_is_refused_at_load(
    tmp_path: Path, command: str
) -> None:
    """An outside value there is refused (a shell string by the shell rule, an argv item
    that is a script by the nested check); the playbook's own value gets advice (issue 28)."""
    quoted = command if command.startswith("[") else "'" + command.replace("'", "''") + "'"
    err = refused(tmp_path, quoted, {"v": "x"})
    assert "env: {V: '{{ v }}'}" in err.message and "v <- --set" in err.message
    loaded = load_playbook(playbook(tmp_path, quoted), builds=False)
    assert any("read again" in w and "env: {V: '{{ v }}'}" in w for w in loaded.warnings)


def test_a_here_document_placeholder_is_refused_at_load(tmp_path: Path) -> None:
    err = refused(tmp_path, '"cat <<EOF\\n{{ v }}\\nEOF"', {"v": "x"})
    assert "shell command line uses `v`" in err.message
    loaded = load_playbook(playbook(tmp_path, '"cat <<EOF\\n{{ v }}\\nEOF"'), builds=False)
    assert any("here-document" in w for w in loaded.warnings)


@pytest.mark.parametrize(
    "command",
    [
        "'sh -c ''echo \"$1\"'' _ {{ v }}'",  # a positional argument: data
        "'sh -c ''echo \"$V\"'''",  # the value in the environment
        "'echo {{ v }}; sh -c true'",
        "'cat <<< {{ v }}'",  # a here-string is one word, expanded once
        "[sh, -c, 'echo \"$1\"', _, '{{ v }}']",
    ],
)
def test_safe_spellings_load(tmp_path: Path, command: str) -> None:
    load_playbook(playbook(tmp_path, command), builds=False)


def run_sh(line: str) -> str:
    return subprocess.run(["sh", "-c", line], capture_output=True, text=True, check=True).stdout


def test_an_argv_list_and_env_values_run_with_a_hostile_value_inert(tmp_path: Path) -> None:
    value = HOSTILE.format(d=tmp_path)
    argv = render_command(["printf", "%s|", "{{ v }}", "a b"], {}, {"v": value})
    assert run_sh(argv) == f"{value}|a b|"
    script = "printf %s \"$V\"; sh -c 'printf \"|%s\" \"$V\"'"
    line = render_command(script, {"V": "{{ v }}"}, {"v": value})
    assert run_sh(line) == f"{value}|{value}"
    assert list(tmp_path.iterdir()) == []


def test_env_names_that_choose_code_are_refused(tmp_path: Path) -> None:
    path = playbook(tmp_path, "'true'")
    text = path.read_text().replace("  command: 'true'", "  command: 'true'\n  env: {PATH: x}")
    path.write_text(text)
    with pytest.raises(ConfigError) as info:
        load_playbook(path, builds=False)
    assert "PATH: a name that a program may read as code" in info.value.message


def fleet(tmp_path: Path, vars_text: str, command: str = "'true'") -> str:
    playbook(tmp_path, command)
    (tmp_path / "fleet.yaml").write_text(FLEET.replace("VARS", vars_text))
    return str(tmp_path / "fleet.yaml")


def test_an_inventory_var_that_sets_the_launcher_is_refused_with_file_and_line(
    tmp_path: Path,
) -> None:
    hosts = fleet(tmp_path, "daemon_launcher: 'sh -c \"touch /tmp/pwned\"'")
    with pytest.raises(ConfigError) as info:
        load_fleet(hosts, str(tmp_path / "play.yaml"))
    where = info.value.location
    assert where is not None and (where.file, where.line) == (hosts, 7)
    assert "daemon_launcher" in info.value.message and "executed" in info.value.message
    assert load_fleet(hosts, str(tmp_path / "play.yaml"), sets=("daemon_launcher=",)).hosts


def test_an_inventory_var_in_a_commands_program_word_is_refused(tmp_path: Path) -> None:
    hosts = fleet(tmp_path, "tool: /tmp/evil", "'{{ tool }} --check'")
    with pytest.raises(ConfigError) as info:
        load_fleet(hosts, str(tmp_path / "play.yaml"))
    assert "'tool'" in info.value.message and "validate.command" in info.value.message
    fleet(tmp_path, "tool: /tmp/evil", "[echo, '{{ tool }}']")  # an argument: data
    assert load_fleet(hosts, str(tmp_path / "play.yaml")).hosts


def test_the_supervisor_config_never_reads_a_launcher_from_host_vars() -> None:
    from types import SimpleNamespace

    from rollout.steps.kinds.supervise import SuperviseParams, supervisor_conf

    host = SimpleNamespace(vars={"daemon_launcher": "sh -c 'touch /tmp/pwned'"})
    settings = load_playbook(builds=False)
    target = SimpleNamespace(settings=settings, host=host)
    conf = supervisor_conf(target, SuperviseParams())  # type: ignore[arg-type]
    assert "pwned" not in conf and '"launcher": ""' in conf


def test_reserved_names_are_refused_in_inventories(tmp_path: Path) -> None:
    hosts = fleet(tmp_path, "release_dir: /tmp/x")
    with pytest.raises(ConfigError) as info:
        load_fleet(hosts, str(tmp_path / "play.yaml"))
    assert "reserved" in info.value.message
    assert info.value.location is not None and info.value.location.line == 7


def test_a_nul_in_an_inventory_var_is_refused_at_load(tmp_path: Path) -> None:
    hosts = fleet(tmp_path, 'gpu: "a\\0b"')
    with pytest.raises(ConfigError) as info:
        load_fleet(hosts, str(tmp_path / "play.yaml"))
    assert "\\x00" in info.value.message
    assert info.value.location is not None and info.value.location.line == 7


def test_a_lone_surrogate_in_an_inventory_var_is_refused_at_load(tmp_path: Path) -> None:
    """YAML reads `"\\ud83d\\ude00"` (JSON's spelling of one character) as two halves, which
    no UTF-8 text can hold: refused at the var's line, as control characters are."""
    hosts = fleet(tmp_path, 'gpu: "\\ud83d\\ude00"')
    with pytest.raises(ConfigError) as info:
        load_fleet(hosts, str(tmp_path / "play.yaml"))
    assert "ud83d" in info.value.message
    assert info.value.location is not None and info.value.location.line == 7


def test_a_control_character_in_an_inventory_var_name_is_refused(tmp_path: Path) -> None:
    hosts = fleet(tmp_path, '"a\\eb": 1')
    with pytest.raises(ConfigError, match="x1b"):
        load_fleet(hosts, str(tmp_path / "play.yaml"))


def test_control_characters_in_set_values_are_refused() -> None:
    with pytest.raises(UserError, match="control character"):
        parse_set_options(["v=a\x00b"])
    with pytest.raises(UserError, match="control character"):
        parse_set_options(["v=[\"\\u001b[2J\"]"])
    assert parse_set_options(["v=a\tb\nc"]) == {"v": "a\tb\nc"}


@pytest.mark.parametrize(
    ("value", "expected"),
    [("no", False), ("false", False), ("OFF", False), ("0", False), (0, False),
     ("yes", True), ("True", True), ("on", True), ("1", True), (True, True)],
)
def test_when_values_are_booleans(value: object, expected: bool) -> None:
    assert as_condition(value) is expected
    assert evaluate_condition("{{ c }}", {"c": value}) is expected


@pytest.mark.parametrize("value", ["maybe", "", "n", 2, None, [1]])
def test_other_when_values_are_refused(value: object) -> None:
    with pytest.raises(ConfigError, match="must be a boolean"):
        evaluate_condition("{{ c }}", {"c": value})


def test_a_when_set_to_no_by_set_is_false_and_a_word_is_refused_at_load(tmp_path: Path) -> None:
    path = playbook(tmp_path, "'true'")
    loaded = load_playbook(path, {"c": "no"}, builds=False)
    assert evaluate_condition(loaded.step("validate").when, loaded.template_context()) is False
    with pytest.raises(ConfigError, match="must be a boolean") as info:
        load_playbook(path, {"c": "maybe"}, builds=False)
    assert info.value.location is not None and info.value.location.line == 9


@pytest.mark.parametrize("value", ["abc", "s3cr3", "releases", "current", "aaaaaaaaaaaa"])
def test_weak_secrets_are_refused(monkeypatch: pytest.MonkeyPatch, value: str) -> None:
    monkeypatch.setenv("ROLLOUT_TEST_WEAK", value)
    with pytest.raises(UserError, match="too weak to mask"):
        secret("ROLLOUT_TEST_WEAK")
    assert redact("/data/rollout/releases/current") == "/data/rollout/releases/current"


def test_a_weak_secret_in_a_command_is_refused_at_load(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ROLLOUT_TEST_WEAK", "abc")
    with pytest.raises(ConfigError, match="too weak") as info:
        load_playbook(playbook(tmp_path, "'echo {{ secret(\"ROLLOUT_TEST_WEAK\") }}'"),
                      builds=False)
    assert info.value.location is not None and info.value.location.line == 6


def test_a_set_value_that_looks_like_a_secret_warns(tmp_path: Path) -> None:
    path = playbook(tmp_path, "[echo, '{{ api_token }}', '{{ v }}']")
    loaded = load_playbook(path, {"api_token": "ghp_8fK2mQ9xZ4"}, builds=False)
    assert any("looks like a secret" in w and "secret('API_TOKEN')" in w
               for w in loaded.warnings)
    quiet = load_playbook(path, {"api_token": "x", "v": "ghp_8fK2mQ9xZ4"}, builds=False)
    assert not any("looks like a secret" in w for w in quiet.warnings)


def test_the_guard_finds_the_bench_behind_validate_env_exports(tmp_path: Path) -> None:
    from rollout.host.scripts import ops

    line = render_command(["/bin/true", "--c1", "{{ v }}"], {"V": "{{ v }}", "W": "x"},
                          {"v": "a b; $(touch x)"})
    assert ops.executable_problem(line, "r1") is None  # the guard's check before its proof
    assert "not on the host: '/no/bench'" in str(ops.executable_problem(
        line.replace("/bin/true", "/no/bench"), "r1"))


def test_a_bundle_check_reads_an_argv_list_command(tmp_path: Path) -> None:
    from types import SimpleNamespace

    from rollout.engine import needs

    settings = load_playbook(playbook(tmp_path, "'true'"), builds=False)
    step = SimpleNamespace(kind="validate", params={"command": ["{{ release_dir }}/b", "x"]})
    plan = SimpleNamespace(settings_for=lambda name: settings, host_steps=[step])
    assert needs._validate_template(plan, "h1") == ["{{ release_dir }}/b", "x"]
    plan.host_steps = []
    assert needs._validate_template(plan, "h1") == "true"


def test_an_ansible_ini_var_that_sets_the_launcher_exits_2_naming_its_line(
    cli: CliRunner, tmp_path: Path,
) -> None:
    playbook(tmp_path, "'true'")
    (tmp_path / "hosts").write_text(
        "[gpu]\nlab-1 ansible_host=127.0.0.1 daemon_launcher=\"sh -c 'touch /tmp/pwned'\"\n")
    p = cli("status", "--hosts", str(tmp_path / "hosts"), "--playbook",
            str(tmp_path / "play.yaml"), cwd=tmp_path)  # fmt: skip
    assert p.returncode == 2, p.stderr
    assert f"{tmp_path / 'hosts'}:2: daemon_launcher" in p.stderr
    assert "Traceback" not in p.stderr


def test_host_in_a_programs_word_is_refused(tmp_path: Path) -> None:
    hosts = fleet(tmp_path, "tool: /tmp/evil", "['{{ host.vars.tool }}', --check]")
    with pytest.raises(ConfigError, match="`host`") as info:
        load_fleet(hosts, str(tmp_path / "play.yaml"))
    assert info.value.location is not None and info.value.location.line == 6


def test_a_weak_secret_in_the_config_template_is_refused_at_load(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ROLLOUT_TEST_WEAK", "current")
    (tmp_path / "cuzk.toml.j2").write_text("token = \"{{ secret('ROLLOUT_TEST_WEAK') }}\"\n")
    path = playbook(tmp_path, "'true'")
    path.write_text(path.read_text().replace("release: {", "daemon: {config_template: "
                                             "cuzk.toml.j2}\nrelease: {"))
    with pytest.raises(ConfigError, match="too weak") as info:
        load_playbook(path, builds=False)
    assert info.value.location is not None and info.value.location.key == "daemon.config_template"


def test_an_inventory_var_guarded_by_default_in_a_program_word_is_refused(
        tmp_path: Path) -> None:
    """`{{ tool | default('x') }}` reads `tool` all the same: an inventory var there is
    refused like an unguarded one."""
    playbook = tmp_path / "playbook.yaml"
    playbook.write_text(PLAYBOOK.replace(
        "COMMAND", "[\"{{ tool | default('cuzk-bench') }}\", --help]"))
    fleet = tmp_path / "fleet.yaml"
    fleet.write_text(FLEET.replace("VARS", "tool: /tmp/evil"))
    (tmp_path / "known_hosts").write_text("")
    with pytest.raises(ConfigError, match="inventory var 'tool'"):
        load_fleet(str(fleet), str(playbook))
