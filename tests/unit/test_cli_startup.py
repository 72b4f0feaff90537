"""Start-up time (issue 16): `rollout --version`, `--help` and a task's `--help` load no
command, and a fleet.yaml inventory is read without the Ansible readers. Each check runs in
a fresh interpreter, since this test process has imported everything already."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

# what the command's start must not load: the commands, the engine, SSH, templates, models
HEAVY = ("rollout.commands", "rollout.engine", "rollout.config", "paramiko", "jinja2",
         "pydantic", "docker", "rich", "ruamel")  # fmt: skip


def _loaded_after(code: str) -> set[str]:
    probe = code + "\nimport sys\nprint('\\n'.join(sys.modules))"
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                         check=True, timeout=120)  # fmt: skip
    return set(out.stdout.split())


def _heavy(modules: set[str]) -> list[str]:
    return sorted(m for m in modules if m.split(".")[0] in HEAVY or m.startswith(HEAVY))


def test_the_command_starts_without_the_commands() -> None:
    assert _heavy(_loaded_after("import rollout.cli")) == []


def test_version_and_task_help_load_no_command() -> None:
    for argv in (["--version"], ["status", "--help"], ["rollout", "--help"], ["--list"]):
        code = textwrap.dedent(f"""
            import sys
            from rollout.cli import program
            sys.argv = ["rollout", *{argv!r}]
            program.run(exit=False)
        """)
        assert _heavy(_loaded_after(code)) == [], argv


def test_a_fleet_yaml_is_read_without_the_ansible_readers(tmp_path: Path) -> None:
    fleet = tmp_path / "fleet.yaml"
    fleet.write_text("hosts:\n  - {name: a, address: 127.0.0.1}\n")
    ini = tmp_path / "inventory.ini"
    ini.write_text("a ansible_host=127.0.0.1\n")
    read = "from rollout.config.inventory import load_inventory\nload_inventory({!r})"
    assert "rollout.config.ansible" not in _loaded_after(read.format(str(fleet)))
    assert "rollout.config.ansible" in _loaded_after(read.format(str(ini)))  # the check can see it
