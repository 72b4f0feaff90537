"""The project file (rollout.yaml): precedence, the nearest file, bad keys at file:line,
hostile values, the playbook line every command prints, and `rollout init`."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from rollout.cli import project as cli_project
from rollout.commands import app
from rollout.commands.init import Choices, project_files, write_project
from rollout.config.playbook import DEFAULT_PLAYBOOK, LAB_PLAYBOOK
from rollout.config.project import find_project, load_project
from rollout.errors import ConfigError, UserError

FLEET = """hosts:
  - {name: h1, address: 127.0.0.1, port: 1}
"""


def rollout(cwd: Path, *args: str, env: dict[str, str] | None = None
            ) -> subprocess.CompletedProcess[str]:
    import os

    full = {k: v for k, v in os.environ.items()
            if k not in ("ROLLOUT_HOSTS", "ROLLOUT_PLAYBOOK", "ROLLOUT_PROJECT")}
    return subprocess.run([sys.executable, "-m", "rollout", *args], cwd=cwd, text=True,
                          capture_output=True, env={**full, **(env or {})}, timeout=120)


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    for name in ("ROLLOUT_HOSTS", "ROLLOUT_PLAYBOOK", "ROLLOUT_PROJECT"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setattr(cli_project, "explicit", None)
    (tmp_path / "fleet.yaml").write_text(FLEET)
    (tmp_path / "other.yaml").write_text(FLEET)
    (tmp_path / "rollout.yaml").write_text(
        "inventory: fleet.yaml\nplaybook: " + str(LAB_PLAYBOOK) + "\n")
    sub = tmp_path / "a" / "b"
    sub.mkdir(parents=True)
    monkeypatch.chdir(sub)
    return tmp_path


def test_nearest_project_file_wins(project: Path) -> None:
    assert find_project(Path.cwd()) == project / "rollout.yaml"
    (project / "a" / "rollout.yaml").write_text("inventory: x.yaml\n")
    assert find_project(Path.cwd()) == project / "a" / "rollout.yaml"


def test_paths_are_relative_to_the_project_file(project: Path) -> None:
    chosen = cli_project.inventory_for(None)
    assert chosen == str(project / "fleet.yaml")
    assert chosen.source == f"{project / 'rollout.yaml'}:1"


def test_precedence_command_line_then_environment_then_project(
        project: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ROLLOUT_HOSTS", str(project / "other.yaml"))
    monkeypatch.setenv("ROLLOUT_PLAYBOOK", str(DEFAULT_PLAYBOOK))
    assert cli_project.inventory_for(None).source == "ROLLOUT_HOSTS"
    assert cli_project.inventory_for("given.yaml").source == "--hosts"
    playbook = cli_project.playbook_for(None)
    assert playbook == str(DEFAULT_PLAYBOOK) and playbook.source == "ROLLOUT_PLAYBOOK"
    monkeypatch.delenv("ROLLOUT_PLAYBOOK")
    named = cli_project.playbook_for(None)
    assert named is not None and named.source.endswith("rollout.yaml:2")


def test_explicit_project_file(project: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    named = project / "named.yaml"
    named.write_text("inventory: other.yaml\n")
    monkeypatch.setenv("ROLLOUT_PROJECT", str(named))
    assert cli_project.inventory_for(None) == str(project / "other.yaml")


def test_unknown_top_key_names_file_line_and_key(tmp_path: Path) -> None:
    path = tmp_path / "rollout.yaml"
    path.write_text("inventory: f.yaml\nplaybok: p.yaml\n")
    with pytest.raises(ConfigError) as err:
        load_project(path)
    assert f"{path}:2: playbok" in str(err.value) and "did you mean 'playbook'" in str(err.value)


def test_unknown_option_default_names_line_and_a_close_option(project: Path) -> None:
    (project / "rollout.yaml").write_text("defaults:\n  status:\n    limitt: x\n")
    result = rollout(project, "status")
    assert result.returncode == 2
    assert "rollout.yaml:3: defaults.status.limitt" in result.stderr
    assert "did you mean 'limit'" in result.stderr


@pytest.mark.parametrize("value", ["[a, b]", "{x: 1}", "true", "12"])
def test_a_default_of_the_wrong_type_is_refused(project: Path, value: str) -> None:
    (project / "rollout.yaml").write_text(f"defaults:\n  status:\n    limit: {value}\n")
    result = rollout(project, "status")
    assert result.returncode == 2 and "rollout.yaml:3: defaults.status.limit: must be a " \
        "string" in result.stderr


def test_a_default_is_data_never_an_option(project: Path) -> None:
    """A value that looks like a flag is the option's value (a --limit pattern), never a
    flag: `--help` as a limit matches no host rather than printing help."""
    (project / "rollout.yaml").write_text(
        "inventory: fleet.yaml\ndefaults:\n  status:\n    limit: '--help; touch /tmp/x'\n")
    result = rollout(project, "status")
    assert result.returncode == 2 and "Usage" not in result.stdout
    assert "matches no host" in result.stderr or "--help; touch" in result.stderr


def test_hosts_and_playbook_are_no_option_defaults(project: Path) -> None:
    (project / "rollout.yaml").write_text("defaults:\n  status:\n    hosts: x.yaml\n")
    result = rollout(project, "status")
    assert result.returncode == 2 and "unknown option" in result.stderr


def test_each_command_prints_the_playbook_and_inventory_it_used(project: Path) -> None:
    """status with --json too: the line on stderr, the same two in the JSON."""
    result = rollout(project, "status", "--json", "--min-capacity", "0")
    line = (f"playbook: {LAB_PLAYBOOK} ({project / 'rollout.yaml'}:2); "
            f"inventory: {project / 'fleet.yaml'} ({project / 'rollout.yaml'}:1)")
    assert line in result.stderr, result.stderr
    used = json.loads(result.stdout)["used"]
    assert used["playbook"] == str(LAB_PLAYBOOK)
    assert used["inventory_from"] == f"{project / 'rollout.yaml'}:1"


def test_the_built_in_playbook_is_never_chosen_silently(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "fleet.yaml").write_text(FLEET)
    app.load_fleet(str(tmp_path / "fleet.yaml"))
    err = capsys.readouterr().err
    assert f"playbook: {DEFAULT_PLAYBOOK} (built-in)" in err
    assert "warning: no playbook is named" in err and "rollout init" in err


def test_init_writes_a_project_that_loads(tmp_path: Path) -> None:
    assert 'label: "prov*"' in project_files(Choices(vastai="prov*"))["fleet.yaml"]
    files = project_files(Choices(build="/src/curio", proof="snap-32g"))
    write_project(tmp_path, files)
    found = load_project(tmp_path / "rollout.yaml")
    plan = app.load_fleet(str(found.path("inventory")), found.path("playbook"))
    assert plan.playbook.vars["proof_kind"] == "snap-32g"
    assert plan.playbook.work.cordon
    assert (tmp_path / ".github/workflows/rollout.yml").exists()


def test_init_for_the_lab_names_the_lab_inventory(tmp_path: Path) -> None:
    files = project_files(Choices(lab_inventory="/lab/fleet.yaml", proof="lab-porep",
                                  ci="gitlab"))
    assert '"/lab/fleet.yaml"' in files["rollout.yaml"] and ".gitlab-ci.yml" in files
    assert "fleet.yaml" not in files


def test_init_refuses_existing_files_and_links(tmp_path: Path) -> None:
    files = project_files(Choices())
    (tmp_path / "fleet.yaml").write_text("mine")
    with pytest.raises(UserError, match="already exist"):
        write_project(tmp_path, files)
    assert not (tmp_path / "rollout.yaml").exists()
    (tmp_path / "fleet.yaml").unlink()
    (tmp_path / "fleet.yaml").symlink_to(tmp_path / "elsewhere")
    with pytest.raises(UserError, match="link"):
        write_project(tmp_path, files, force=True)
    assert not (tmp_path / "elsewhere").exists()


def test_init_refuses_an_unknown_choice() -> None:
    with pytest.raises(UserError, match="--proof"):
        project_files(Choices(proof="porep-1t"))
