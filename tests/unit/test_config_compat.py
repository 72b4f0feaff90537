"""Issue 19: flags set settings (not variables), looking needs no build, --set values are
strings, retired keys load with a warning, `default()` passes the load-time name check, and
a preflight check that fails names the setting that turns it off."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from conftest import CliRunner
from invoke.context import Context

from rollout.cli import rollout_tasks
from rollout.commands import app
from rollout.config import retired
from rollout.config.inventory import Host
from rollout.config.playbook import DEFAULT_PLAYBOOK, parse_set_options
from rollout.config.sections import Retired
from rollout.errors import ConfigError, UserError
from rollout.host.facts import HostFacts
from rollout.steps.kinds import load_playbook, preflight
from rollout.steps.preflight_inputs import Look

PLAYBOOK = """\
name: plain
vars:
  version: v1
build:
  dockerfile: Dockerfile
  context: .
  tag: "lab/prover:{{ version }}"
  image_paths: {cuzk-daemon: /bin/d, cuzk-bench: /bin/b}
daemon:
  drain:
    deadline: 60
    memory_threshold: 0.1
steps:
  - {name: build, kind: build}
  - {name: preflight, kind: preflight}
"""

INVENTORY = """\
defaults: {user: root, known_hosts: known_hosts}
hosts:
  - {name: prod-1, address: 127.0.0.1, port: 40613, vars: {adopt: false}}
"""


DEEPER = 500
"""Nesting deeper than the YAML parser's recursion can go (it fails at about 250 levels
under Python's default limit of 1000 frames): twice that, for the RecursionError paths. Not
more: the parser's time grows much faster than the depth (5,000 levels took 8 s)."""


def write(tmp_path: Path, text: str = PLAYBOOK) -> Path:
    (tmp_path / "Dockerfile").touch()
    path = tmp_path / "play.yaml"
    path.write_text(text)
    return path


def host(**vars: Any) -> Host:
    return Host("h1", "127.0.0.1", 22, "root", None, Path("/k"), "strict", 10, ("all",), vars)


# --adopt sets preflight.adopt, whatever the playbook says


def test_a_setting_wins_over_a_playbook_that_never_mentions_it(tmp_path: Path) -> None:
    playbook = load_playbook(write(tmp_path), settings={"preflight.adopt": True})
    assert playbook.preflight.adopt is True
    assert playbook.for_host(host(adopt=False)).preflight.adopt is True
    assert load_playbook(write(tmp_path)).preflight.adopt is False


def test_a_setting_wins_over_the_playbooks_own_value_and_host_vars(tmp_path: Path) -> None:
    text = PLAYBOOK + "preflight: {adopt: false, cpu_flags: []}\n"
    playbook = load_playbook(write(tmp_path, text), settings={"preflight.adopt": True})
    assert playbook.preflight.adopt is True and playbook.preflight.cpu_flags == []


def test_the_adopt_flag_reaches_the_request_as_a_setting_not_a_var(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    seen: list[app.RolloutRequest] = []

    def run_rollout(req: app.RolloutRequest) -> Any:
        seen.append(req)
        return SimpleNamespace(exit_code=0)

    monkeypatch.setattr(app, "run_rollout", run_rollout)
    fleet = tmp_path / "fleet.yaml"
    fleet.write_text(INVENTORY)
    rollout_tasks.rollout.body(Context(), hosts=str(fleet), adopt=True)
    (req,) = seen
    assert req.sets == () and req.adopt
    assert req.settings() == {"preflight.adopt": True}
    assert req.replayable()["adopt"] is True


def test_load_plan_applies_the_adopt_setting_with_no_warning(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    fleet = tmp_path / "fleet.yaml"
    fleet.write_text(INVENTORY.replace("defaults:", f"playbook: {write(tmp_path)}\ndefaults:"))
    plan = app.load_plan(app.RolloutRequest(str(fleet), adopt=True))
    assert plan.settings_for("prod-1").preflight.adopt is True  # the host var adopt: false too
    assert "adopt" not in capsys.readouterr().err


# looking needs no build


def test_looking_loads_the_default_playbook_without_a_curio_checkout(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)  # no playbooks/ here: the built-in real playbook
    monkeypatch.setenv("HOME", str(tmp_path / "home"))  # no ~/curio
    fleet = tmp_path / "fleet.yaml"
    fleet.write_text(INVENTORY)
    plan = app.load_fleet(str(fleet))
    assert plan.playbook.path == DEFAULT_PLAYBOOK
    assert plan.playbook.build_section is None
    with pytest.raises(ConfigError, match="without its build section"):
        plan.playbook.build  # noqa: B018 - the access is what is tested
    with pytest.raises(ConfigError) as err:  # a command that builds still checks it
        app.load_fleet(str(fleet), builds=True)
    assert err.value.location is not None and err.value.location.key == "build.context"


def test_a_command_that_builds_still_needs_a_build_section(tmp_path: Path) -> None:
    text = PLAYBOOK.replace("build:\n", "unused:\n").replace("unused:", "x_build:", 1)
    text = "\n".join(line for line in text.splitlines() if not line.startswith(
        ("x_build:", "  dockerfile", "  context", "  tag", "  image_paths")))
    assert load_playbook(write(tmp_path, text), builds=False).build_section is None
    with pytest.raises(ConfigError, match="missing required key") as err:
        load_playbook(write(tmp_path, text))
    assert err.value.location is not None and err.value.location.key == "build"


# --set values are strings


def test_set_version_1_10_tags_the_image_1_10(tmp_path: Path) -> None:
    sets = parse_set_options(["version=1.10", f"curio_dir={tmp_path}"])
    assert load_playbook(DEFAULT_PLAYBOOK, sets).build.tag == "rollout/cuzk:1.10"
    assert load_playbook(DEFAULT_PLAYBOOK, {**sets, "version": "010"}).build.tag.endswith(":010")


def test_typed_options_read_string_values(tmp_path: Path) -> None:
    sets = parse_set_options(
        ["has_gpu=false", "stop_grace=7", "serial=2", "gpus=[0, 1]", f"curio_dir={tmp_path}"]
    )
    playbook = load_playbook(DEFAULT_PLAYBOOK, sets)
    assert playbook.preflight.gpus is False and playbook.daemon.stop_grace == 7
    assert playbook.rolling.serial == [2] and playbook.daemon.gpu_devices == [0, 1]


def test_a_vars_file_gives_typed_values(tmp_path: Path) -> None:
    text = "version: '1.10'\npool: 64\ngpus: [0, 1]\nwhen: 2024-01-01\n"
    (tmp_path / "vars.yaml").write_text(text)
    sets = parse_set_options([f"@{tmp_path / 'vars.yaml'}", "pool=8"])
    assert sets == {"version": "1.10", "pool": "8", "gpus": [0, 1], "when": "2024-01-01"}
    (tmp_path / "vars.json").write_text('{"a": {"b": [1, 2.5, null]}}')
    assert parse_set_options([f"@{tmp_path / 'vars.json'}"]) == {"a": {"b": [1, 2.5, None]}}


@pytest.mark.parametrize(
    ("text", "line", "message"),
    [
        ("a: 1\nb: [1\n", 3, "invalid YAML"),
        ("- 1\n- 2\n", None, "a mapping of names"),
        ("a: 1\nbad name: 2\n", 2, "not an identifier"),
        ("a: 1\nhost: 2\n", 2, "reserved"),
        ("a: 1\nb: " + "[" * 40 + "]" * 40 + "\n", 2, "nested deeper"),
        ("a: 1\nb: " + "[" * DEEPER + "]" * DEEPER + "\n", 2, "nested deeper than 32"),
        ("a: &x [1, 1, 1, 1, 1, 1, 1, 1, 1, 1]\n" + "".join(
            f"{n}: &{n}x [{', '.join([f'*{p}x' if p != 'a' else '*x'] * 10)}]\n"
            for p, n in zip("abcdef", "bcdefg", strict=True)), 5, "more than"),
    ],
)
def test_a_bad_vars_file_names_its_file_and_line(
    tmp_path: Path, text: str, line: int | None, message: str
) -> None:
    path = tmp_path / "vars.yaml"
    path.write_text(text)
    with pytest.raises(UserError, match=message) as err:
        parse_set_options([f"@{path}"])
    assert err.value.location is not None and err.value.location.file == str(path)
    assert err.value.location.line == line


def test_a_missing_vars_file_is_a_user_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="vars file not found"):
        parse_set_options([f"@{tmp_path / 'nope.yaml'}"])


# retired keys


def test_last_releases_memory_threshold_loads_with_a_warning_naming_its_replacement(
    tmp_path: Path,
) -> None:
    playbook = load_playbook(write(tmp_path))
    (warning,) = playbook.warnings
    assert warning.startswith(f"{tmp_path / 'play.yaml'}:12: daemon.drain.memory_threshold")
    assert "removed" in warning and "daemon.drain.plateau" in warning
    assert playbook.daemon.drain.deadline == 60


def test_a_renamed_key_moves_its_value_to_the_new_key(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    table = (Retired(key="daemon.drain.memory_threshold", replaced_by="daemon.drain.plateau",
                     why="same meaning"),)
    monkeypatch.setattr(retired, "RETIRED_KEYS", table)
    monkeypatch.setattr(retired.retire_keys, "__defaults__", (table,))
    text = PLAYBOOK.replace("memory_threshold: 0.1", "memory_threshold: 42")
    playbook = load_playbook(write(tmp_path, text))
    assert playbook.daemon.drain.plateau == 42
    assert "renamed daemon.drain.plateau" in playbook.warnings[0]
    both = text.replace("deadline: 60", "plateau: 9")
    playbook = load_playbook(write(tmp_path, both))
    assert playbook.daemon.drain.plateau == 9 and "is ignored" in playbook.warnings[0]


def test_an_unknown_key_is_still_an_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="unknown key"):
        load_playbook(write(tmp_path, PLAYBOOK.replace("memory_threshold", "memory_thresh")))


# default() and `is defined` in runtime templates


@pytest.mark.parametrize(
    ("command", "when"),
    [
        ("echo {{ extra | default('') }}", "canary | d(false)"),
        ("echo {{ extra if extra is defined else 'none' }}", "canary is defined and canary"),
        ("echo {{ extra | d }}", "canary is undefined or not canary"),
    ],
)
def test_guarded_names_pass_the_load_time_check(tmp_path: Path, command: str, when: str) -> None:
    step = f'  - {{name: v, kind: validate, when: "{when}"}}\n'
    text = PLAYBOOK.replace("  - {name: preflight, kind: preflight}\n", step)
    text += f'validate: {{command: "{command}"}}\n'
    playbook = load_playbook(write(tmp_path, text))
    per_host = playbook.for_host(host())
    assert per_host.validation.command == command and per_host.step("v").when == when


@pytest.mark.parametrize(
    "command",
    [
        "echo {{ extra.x | default('') }}",
        "{% if extra is defined %}{% else %}{{ extra }}{% endif %}",
        "echo {{ extra }}",
    ],
)
def test_unguarded_names_are_still_refused(tmp_path: Path, command: str) -> None:
    playbook = load_playbook(write(tmp_path, PLAYBOOK + f"validate: {{command: \"{command}\"}}\n"))
    with pytest.raises(ConfigError, match="undefined name"):
        playbook.for_host(host())


# a failing check names the setting that turns it off


def gpu_ctx(exit_code: int, stdout: str, devices: list[int] | None = None) -> Any:
    report = {"outcome": "ran", "exit": exit_code, "output": stdout}  # ops.gpus's report
    settings = SimpleNamespace(
        preflight=SimpleNamespace(gpus=True), daemon=SimpleNamespace(gpu_devices=devices or [])
    )
    return SimpleNamespace(settings=settings, call=lambda *a, **k: report)


@pytest.mark.parametrize(
    ("ctx", "problem"),
    [
        (gpu_ctx(127, "nvidia-smi: not found"), "nvidia-smi: not found"),
        (gpu_ctx(0, ""), "lists no GPU"),
        (gpu_ctx(0, "0, GPU-a, H100, 550.54.15, 9.0, 81559, 81000\n", [1]), "GPU [1] not listed"),
    ],
)
def test_a_failing_gpu_check_names_the_setting_that_turns_it_off(ctx: Any, problem: str) -> None:
    (message,) = preflight.check_gpus(Look(ctx, HostFacts(), ctx), [])  # type: ignore[arg-type]
    assert problem in message and "preflight.gpus false" in message and "has_gpu" in message


def test_a_failing_cpu_check_names_the_setting_that_turns_it_off() -> None:
    settings = SimpleNamespace(preflight=SimpleNamespace(cpu_flags=["adx"]))
    ctx = SimpleNamespace(settings=settings,
                          call=lambda *a, **k: {"outcome": "read", "text": "flags : fpu sse"})
    (message,) = preflight.check_cpu(Look(ctx, HostFacts(), ctx), [])  # type: ignore[arg-type]
    assert "lacks adx" in message and "preflight.cpu_flags" in message and "[]" in message


@pytest.mark.parametrize(
    "value",
    ["a=" + "[" * 50_000, 'a=[x"y, ' + "[" * DEEPER + "]" * (DEEPER + 1), "@DEEP", "@MISSING"],
)
def test_hostile_set_values_exit_2_through_the_cli(
    cli: CliRunner, tmp_path: Path, value: str
) -> None:
    fleet = tmp_path / "fleet.yaml"
    fleet.write_text(INVENTORY)
    deep = tmp_path / "deep.yaml"
    deep.write_text("a: 1\nb: " + "[" * DEEPER + "]" * DEEPER + "\n")
    value = value.replace("@DEEP", f"@{deep}").replace("@MISSING", f"@{tmp_path}/none.yaml")
    p = cli("rollout", "--hosts", str(fleet), "--set", value, cwd=tmp_path)
    assert p.returncode == 2, p.stderr[-2000:]
    assert "internal error" not in p.stderr and "Traceback" not in p.stderr
    assert "nested" in p.stderr or "not found" in p.stderr
