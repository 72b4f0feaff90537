from __future__ import annotations

import os
from pathlib import Path

import pytest

from rollout.config.docs import options_markdown
from rollout.config.inventory import Host
from rollout.config.playbook import DEFAULT_PLAYBOOK, parse_set_options
from rollout.config.render import evaluate_condition, render_runtime
from rollout.config.sections import parse_size
from rollout.config.steps import FailureClass, RetryPolicy, StepKind
from rollout.errors import ConfigError, Location, UserError
from rollout.steps.kinds import HOST_KINDS, load_playbook

PLAYBOOK = """\
name: test
vars:
  version: v1
  image: lab/prover
  tag: "{{ image }}:{{ version }}"
  pool: 8
rolling:
  serial: [1, "50%"]
build:
  dockerfile: ../docker/Dockerfile
  context: ../docker
  tag: "{{ tag }}"
  args: {VERSION: "{{ version }}"}
  image_paths: {cuzk-daemon: /bin/d, cuzk-bench: /bin/b}
validate:
  command: "{{ release_dir }}/cuzk-bench -a http://{{ daemon.listen }} --v {{ 'v1' }}"
steps:
  - {name: build, kind: build}
  - {name: upload, kind: upload, retry: {attempts: 3, on: [transport]}}
  - name: validate
    kind: validate
    params: {timeout: "{{ pool }}", success_pattern: "pool-{{ pool }}"}
    when: "version != 'v0'"
"""


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "plays" / "play.yaml"
    path.parent.mkdir(exist_ok=True)
    (tmp_path / "docker").mkdir(exist_ok=True)
    (tmp_path / "docker" / "Dockerfile").touch()
    path.write_text(text)
    return path


def error_of(tmp_path: Path, text: str, **overrides: object) -> ConfigError:
    with pytest.raises(ConfigError) as info:
        load_playbook(write(tmp_path, text), overrides)
    return info.value


def where(err: ConfigError) -> tuple[int | None, str | None]:
    assert isinstance(err.location, Location)
    return err.location.line, err.location.key


def host(**vars: object) -> Host:
    return Host("lab-1", "127.0.0.1", 22001, "root", None, Path("/k"), "strict", 10, ("lab",), vars)


def test_default_playbook_loads(tmp_path: Path) -> None:
    playbook = load_playbook(overrides={"curio_dir": str(tmp_path)})  # a curio checkout
    assert playbook.path == DEFAULT_PLAYBOOK
    assert [s.kind for s in playbook.steps][:2] == [StepKind.BUILD, StepKind.EXTRACT]
    assert [s.name for s in playbook.steps_in("controller")] == ["build", "extract"]
    assert playbook.build.dockerfile.name == "cuzk.Dockerfile"
    assert playbook.build.dockerfile.is_absolute()
    assert playbook.build.tag == "rollout/cuzk:v1"
    assert playbook.rolling.serial == [1, "100%"]
    assert playbook.step("validate").retry.retries(FailureClass.TIMEOUT)
    assert not playbook.step("validate").retry.retries(FailureClass.TRANSPORT)


def test_load_renders_with_vars(tmp_path: Path) -> None:
    playbook = load_playbook(write(tmp_path, PLAYBOOK))
    assert playbook.build.tag == "lab/prover:v1"
    assert playbook.build.args == {"VERSION": "v1"}
    assert playbook.build.dockerfile == tmp_path / "docker/Dockerfile"
    params = playbook.step("validate").params
    assert params == {"timeout": 8, "success_pattern": "pool-8"}  # one expression keeps its type
    assert playbook.step("upload").scope == "host"
    assert playbook.step("build").scope == "controller"


def test_runtime_templates_are_left_for_the_engine(tmp_path: Path) -> None:
    playbook = load_playbook(write(tmp_path, PLAYBOOK))
    assert playbook.validation.command.startswith("{{ release_dir }}")
    context = playbook.template_context(host(), release_dir="/data/releases/r1")
    command = render_runtime(playbook.validation.command, context)
    assert command == "/data/releases/r1/cuzk-bench -a http://127.0.0.1:9820 --v v1"
    assert evaluate_condition(playbook.step("validate").when, context) is True
    assert render_runtime("{{ host.name }} {{ release.root }}", context) == "lab-1 /data"


def test_runtime_template_error_names_location(tmp_path: Path) -> None:
    playbook = load_playbook(write(tmp_path, PLAYBOOK))
    with pytest.raises(ConfigError, match="'release_dir' is undefined") as info:
        render_runtime(
            playbook.validation.command,
            playbook.template_context(),
            playbook.location("validate", "command"),
        )
    assert where(info.value) == (16, "validate.command")


def test_overrides_win_as_strings(tmp_path: Path) -> None:
    overrides = parse_set_options(["version=v2", "pool=64"])
    assert overrides == {"version": "v2", "pool": "64"}  # strings, like Ansible's -e
    typed = PLAYBOOK.replace('timeout: "{{ pool }}"', 'timeout: "{{ pool | int }}"')
    playbook = load_playbook(write(tmp_path, typed), overrides)
    assert playbook.build.tag == "lab/prover:v2"  # vars that use version see the override
    assert playbook.step("validate").params["timeout"] == 64
    with pytest.raises(ConfigError, match="valid number"):  # a step's seconds: numbers only
        load_playbook(write(tmp_path, PLAYBOOK), overrides)
    assert load_playbook(write(tmp_path, PLAYBOOK), {"pool": 64}).step("validate").params == {
        "timeout": 64, "success_pattern": "pool-64"}  # typed, as from a vars file


def test_for_host_merges_host_vars_between_vars_and_overrides(tmp_path: Path) -> None:
    playbook = load_playbook(write(tmp_path, PLAYBOOK), {"version": "v3"})
    per_host = playbook.for_host(host(pool=16, version="v9", image="other/img"))
    assert per_host.host_name == "lab-1"
    assert per_host.step("validate").params["timeout"] == 16
    assert per_host.build.tag == "other/img:v3"  # --set beats host vars
    assert playbook.step("validate").params["timeout"] == 8  # the original is unchanged


def test_hosts_with_the_same_vars_share_one_rendering(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A fleet whose hosts have the same vars renders the playbook once for them (each host
    still gets a playbook naming it); other vars, even equal as text or number, render
    again."""
    from rollout.config.playbook import PlaybookSource

    playbook = load_playbook(write(tmp_path, PLAYBOOK))
    rendered: list[object] = []
    real = PlaybookSource._render

    def counted(self: PlaybookSource, fixed: object, for_host: bool = False) -> object:
        rendered.append(fixed)
        return real(self, fixed, for_host)  # type: ignore[arg-type]

    monkeypatch.setattr(PlaybookSource, "_render", counted)
    hosts = [Host(f"h{i}", "127.0.0.1", 22001 + i, "root", None, Path("/k"), "strict", 10,
                  ("lab",), {"pool": 16}) for i in range(3)]
    per_host = [playbook.for_host(h) for h in hosts]
    assert len(rendered) == 1
    assert [p.host_name for p in per_host] == ["h0", "h1", "h2"]
    assert all(p.step("validate").params["timeout"] == 16 for p in per_host)
    assert playbook.for_host(host(pool=16)).host_name == "lab-1" and len(rendered) == 1
    for other in ({"pool": 17}, {"pool": 16.0}, {"pool": 16, "x": None}, {"pool": 16, "x": 1},
                  {"pool": 16, "x": "1"}, {"pool": 16, "x": True}):
        playbook.for_host(host(**other))
    assert len(rendered) == 7
    with pytest.raises(ConfigError, match=r"\(for host lab-1\)"):  # a refusal is never kept
        playbook.for_host(host(pool="many"))
    with pytest.raises(ConfigError, match=r"\(for host lab-1\)"):
        playbook.for_host(host(pool="many"))


def test_for_host_error_names_the_host(tmp_path: Path) -> None:
    playbook = load_playbook(write(tmp_path, PLAYBOOK))
    with pytest.raises(ConfigError, match=r"\(for host lab-1\)") as info:
        playbook.for_host(host(pool="many", version=[1]))
    assert info.value.location is not None


@pytest.mark.parametrize(
    ("options", "expected"),
    [
        (["a=1"], {"a": "1"}),
        (["a=1.5", "b=true", "c=hello"], {"a": "1.5", "b": "true", "c": "hello"}),
        (["version=1.10", "v=010", "n=null", "d=2024-01-01"],
         {"version": "1.10", "v": "010", "n": "null", "d": "2024-01-01"}),
        (["a="], {"a": ""}),
        (["a=x=y"], {"a": "x=y"}),
        (["a=[1, 2]"], {"a": [1, 2]}),
        (["a= [1, 2]"], {"a": [1, 2]}),
        (['a={"b": 1, "c": [true, null]}'], {"a": {"b": 1, "c": [True, None]}}),
        (["a={b: 2024-01-01}"], {"a": {"b": "2024-01-01"}}),  # a date stays its text
        (["a=1", "a=2"], {"a": "2"}),
        (["a=: bad"], {"a": ": bad"}),
    ],
)
def test_parse_set_options(options: list[str], expected: dict[str, object]) -> None:
    assert parse_set_options(options) == expected


@pytest.mark.parametrize(
    "option",
    ["novalue", "bad name=1", "host=x", "a=[1", "a={b: [}", "a=" + "[" * 100_000,
     "a=" + "[" * 33 + "]" * 33, "a=" + "{b: " * 40 + "1" + "}" * 40,
     'a=["x\\"", ' + "[" * 500, 'a=[x"y, ' + "[" * 500 + "]" * 501],  # quotes the scan
)  # reads otherwise: the parser's own recursion is caught too (it fails at about 250 levels;
# 5,000 took 8 s to parse)
def test_parse_set_options_errors(option: str) -> None:
    with pytest.raises(UserError):
        parse_set_options([option])


@pytest.mark.parametrize(
    "option",
    ["a={{ x }}", "a={% if 1 %}{% endif %}", "a={# c #}"],
)
def test_a_set_value_that_looks_like_a_template_is_text(option: str) -> None:
    assert parse_set_options([option]) == {"a": option[2:]}


def test_unknown_key(tmp_path: Path) -> None:
    err = error_of(tmp_path, PLAYBOOK.replace('  tag: "{{ tag }}"', "  tags: x"))
    assert where(err) == (12, "build.tags")
    assert "did you mean 'tag'" in err.message


def test_unknown_top_level_key(tmp_path: Path) -> None:
    err = error_of(tmp_path, PLAYBOOK + "extra: 1\n")
    assert where(err) == (24, "extra")


def test_wrong_type(tmp_path: Path) -> None:
    err = error_of(tmp_path, PLAYBOOK.replace("attempts: 3", "attempts: many"))
    assert where(err) == (19, "steps[1].retry.attempts")
    assert "valid integer" in err.message


def test_bad_serial(tmp_path: Path) -> None:
    err = error_of(tmp_path, PLAYBOOK.replace('[1, "50%"]', '[1, "lots"]'))
    assert where(err) == (8, "rolling.serial")
    assert "'lots'" in err.message


def test_unknown_step_kind(tmp_path: Path) -> None:
    err = error_of(tmp_path, PLAYBOOK.replace("kind: upload", "kind: uplod"))
    assert where(err) == (19, "steps[1].kind")
    assert "'build'" in err.message


def test_unknown_retry_class(tmp_path: Path) -> None:
    err = error_of(tmp_path, PLAYBOOK.replace("on: [transport]", "on: [weather]"))
    assert where(err) == (19, "steps[1].retry.on[0]")


def test_template_error_names_line_and_key(tmp_path: Path) -> None:
    err = error_of(tmp_path, PLAYBOOK.replace('{VERSION: "{{ version }}"}', '{V: "{{ nope }}"}'))
    assert where(err) == (13, "build.args.V")
    assert "'nope' is undefined" in err.message


def test_template_error_in_vars(tmp_path: Path) -> None:
    err = error_of(tmp_path, PLAYBOOK.replace("{{ image }}:", "{{ imag }}:"))
    assert where(err) == (5, "vars.tag")


def test_template_syntax_error_in_runtime_template(tmp_path: Path) -> None:
    err = error_of(tmp_path, PLAYBOOK.replace("{{ daemon.listen }}", "{{ daemon.listen }"))
    assert where(err) == (16, "validate.command")
    assert "template error" in err.message


def test_bad_when_expression(tmp_path: Path) -> None:
    err = error_of(tmp_path, PLAYBOOK.replace("version != 'v0'", "version !="))
    assert where(err) == (23, "steps[2].when")


def test_cyclic_vars(tmp_path: Path) -> None:
    text = PLAYBOOK.replace("  pool: 8\n", "  pool: 8\n  a: '{{ b }}'\n  b: '{{ a }}'\n")
    err = error_of(tmp_path, text)
    assert where(err) == (7, "vars.a")


def test_reserved_var_name(tmp_path: Path) -> None:
    err = error_of(tmp_path, PLAYBOOK.replace("  pool: 8", "  daemon: 8"))
    assert where(err) == (6, "vars.daemon")


def test_duplicate_step_name(tmp_path: Path) -> None:
    err = error_of(tmp_path, PLAYBOOK.replace("name: upload", "name: build"))
    assert where(err) == (19, "steps[1].name")
    assert "duplicate step name 'build'" in err.message


def test_controller_step_after_host_step(tmp_path: Path) -> None:
    err = error_of(tmp_path, PLAYBOOK + "  - {name: extract, kind: extract}\n")
    assert where(err) == (24, "steps[3].kind")


def test_executable_without_image_path(tmp_path: Path) -> None:
    err = error_of(tmp_path, PLAYBOOK.replace(", cuzk-bench: /bin/b", ""))
    assert where(err) == (14, "build.image_paths")
    assert "cuzk-bench" in err.message


def test_missing_required_section(tmp_path: Path) -> None:
    text = PLAYBOOK.split("build:")[0] + "steps:" + PLAYBOOK.split("steps:")[1]
    err = error_of(tmp_path, text.replace("{{ release_dir }}", "x"))
    assert err.location is not None and err.location.key == "build"


def test_missing_file(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="playbook file not found"):
        load_playbook(tmp_path / "missing.yaml")


def test_bad_yaml(tmp_path: Path) -> None:
    err = error_of(tmp_path, PLAYBOOK.replace("  pool: 8", "  pool: [8"))
    assert err.location is not None and err.location.line is not None
    assert err.location.line >= 6
    assert "invalid YAML" in err.message


def test_not_a_mapping(tmp_path: Path) -> None:
    err = error_of(tmp_path, "- a\n- b\n")
    assert "mapping" in err.message


def test_retry_delay() -> None:
    policy = RetryPolicy(attempts=5, backoff=2, multiplier=3, max_backoff=30)
    assert [policy.delay(n) for n in (1, 2, 3, 4)] == [2, 6, 18, 30]


def test_evaluate_condition() -> None:
    assert evaluate_condition(True, {}) is True
    assert evaluate_condition("{{ n > 2 }}", {"n": 3}) is True
    assert evaluate_condition("'lab' in host.groups", {"host": {"groups": ["gpu"]}}) is False
    with pytest.raises(ConfigError, match="'n' is undefined"):
        evaluate_condition("n > 2", {})


@pytest.mark.parametrize(
    ("text", "size"),
    [("64MiB", 64 * 2**20), ("5GB", 5 * 10**9), ("100", 100), ("1.5 GiB", 3 * 2**29)],
)
def test_parse_size(text: str, size: int) -> None:
    assert parse_size(text) == size


def test_options_reference_lists_every_option() -> None:
    text = options_markdown(HOST_KINDS)
    for key in (
        "hosts[].host_key_policy",
        "rolling.serial",
        "steps[].retry.on",
        "daemon.drain.deadline",
    ):
        assert f"`{key}`" in text


def test_single_expression_of_a_string_stays_a_string(tmp_path: Path) -> None:
    text = PLAYBOOK.replace("  pool: 8", "  pool: '1.0'").replace(
        'timeout: "{{ pool }}", success_pattern: "pool-{{ pool }}"',
        'timeout: 5, success_pattern: "{{ pool }}"')
    playbook = load_playbook(write(tmp_path, text))
    assert playbook.step("validate").params["success_pattern"] == "1.0"


def test_unknown_or_misspelt_step_param_names_file_line_and_key(tmp_path: Path) -> None:
    text = PLAYBOOK.replace('success_pattern: "pool', 'success_patern: "pool')
    err = error_of(tmp_path, text)
    assert where(err) == (22, "steps[2].params.success_patern"), err
    assert "did you mean 'success_pattern'" in err.message


def test_step_param_of_the_wrong_type_is_refused(tmp_path: Path) -> None:
    text = PLAYBOOK.replace("  - {name: upload, kind: upload,",
                            "  - {name: stop, kind: stop, params: {grace: soon}}\n"
                            "  - {name: upload, kind: upload,")
    err = error_of(tmp_path, text)
    assert where(err)[1] == "steps[1].params.grace", err


def test_a_named_file_that_is_a_fifo_is_refused_at_load(tmp_path: Path) -> None:
    """A FIFO (or a device) where the playbook names a file is refused when it loads, never
    opened: reading one would hang the controller or never end."""
    os.mkfifo(tmp_path / "c1.fifo")
    text = PLAYBOOK.replace(
        "validate:\n", f"validate:\n  input: {{path: /data/c1.json, source: {tmp_path}/c1.fifo}}\n")
    err = error_of(tmp_path, text)
    assert "not a file (a regular file" in err.message
    assert where(err)[1] == "validate.input.source"
