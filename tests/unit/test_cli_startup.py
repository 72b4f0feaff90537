"""Start-up time (issues 16 and 30): `rollout --version` loads neither invoke nor a task,
`--help` and a task's `--help` load no command, a fleet.yaml inventory is read without the
Ansible readers, and each command loads only what it uses (`status` no Docker, no bundle
code and no engine run; a rollout of a built bundle no Docker). Each check runs in a fresh
interpreter, since this test process has imported everything already."""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from rollout.bundle.local import write_bundle
from rollout.bundle.manifest import manifest_for
from rollout.bundle.release import Artifact, Release, release_id_of
from rollout.config.playbook import LAB_PLAYBOOK

# what the command's start must not load: the commands, the engine, SSH, templates, models
HEAVY = ("rollout.commands", "rollout.engine", "rollout.config", "paramiko", "jinja2",
         "pydantic", "docker", "rich", "ruamel")  # fmt: skip


# what a status never needs: it builds nothing, deploys no bundle and runs no engine
NOT_FOR_STATUS = ("docker", "tenacity", "rich.progress", "boto3", "rollout.commands.app",
                  "rollout.commands.build", "rollout.commands.dryrun", "rollout.engine.run",
                  "rollout.bundle.local", "rollout.bundle.manifest", "rollout.bundle.remote",
                  "rollout.bundle.source", "rollout.lab", "rollout.bench", "rollout.reports",
                  "rollout.config.ansible")  # fmt: skip


def _loaded_after(code: str, cwd: Path | None = None) -> set[str]:
    probe = code + "\nimport sys\nprint('\\n'.join(sys.modules))"
    env = {**os.environ, "ROLLOUT_RUNS_DIR": str(cwd or Path.cwd())} if cwd else None
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                         check=True, timeout=120, cwd=cwd, env=env)  # fmt: skip
    return set(out.stdout.split())


def _command_loads(argv: list[str], cwd: Path) -> set[str]:
    """The modules loaded once `rollout ARGV` ran to its end, in `cwd`."""
    code = textwrap.dedent(f"""
        import sys
        from rollout.cli import program
        sys.argv = ["rollout", *{argv!r}]
        try:
            program.run()
        except SystemExit:
            pass
    """)
    return _loaded_after(code, cwd)


def _under(modules: set[str], names: tuple[str, ...]) -> list[str]:
    """The modules that are one of `names` or inside one of them."""
    return sorted(m for m in modules if any(m == n or m.startswith(n + ".") for n in names))


@pytest.fixture
def unreachable(tmp_path: Path) -> Path:
    """A fleet of one host that refuses connections (a closed port on loopback)."""
    (tmp_path / "fleet.yaml").write_text(
        f"playbook: {LAB_PLAYBOOK}\nhosts:\n  - {{name: a, address: 127.0.0.1, port: 1}}\n")
    return tmp_path


def _a_bundle(folder: Path) -> Path:
    artifacts = []
    for name in ("cuzk-daemon", "cuzk-bench"):
        path = folder / "extracted" / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(name.encode() * 100)
        digest = hashlib.sha256(path.read_bytes()).hexdigest()
        artifacts.append(Artifact(name, str(path), digest, path.stat().st_size))
    release = Release(release_id_of(artifacts), "img:c-1", "v7", tuple(artifacts))
    write_bundle(folder / "bundle", release, manifest_for(release, None, {}, None, "2026-01-01"))
    return folder / "bundle"


def _heavy(modules: set[str]) -> list[str]:
    return sorted(m for m in modules if m.split(".")[0] in HEAVY or m.startswith(HEAVY))


def test_the_command_starts_without_the_commands() -> None:
    assert _heavy(_loaded_after("import rollout.cli")) == []


def test_version_is_answered_before_invoke_and_the_tasks() -> None:
    for flag in ("--version", "-V"):
        code = f"import sys\nfrom rollout.cli import main\nsys.argv = ['rollout', {flag!r}]\nmain()"
        loaded = _loaded_after(code)
        assert _under(loaded, ("rollout", "invoke")) == ["rollout", "rollout.cli",
                                                         "rollout.cli.version"], flag


def test_status_loads_no_docker_no_bundle_code_and_no_engine_run(unreachable: Path) -> None:
    loaded = _command_loads(["status", "--hosts", "fleet.yaml"], unreachable)
    assert _under(loaded, NOT_FOR_STATUS) == []
    assert "paramiko" in loaded and "rollout.commands.status" in loaded  # it ran: it connected


def test_a_rollout_of_a_built_bundle_loads_no_docker(unreachable: Path) -> None:
    bundle = _a_bundle(unreachable)
    loaded = _command_loads(["rollout", "--hosts", "fleet.yaml", "--release", str(bundle)],
                            unreachable)  # fmt: skip
    assert _under(loaded, ("docker",)) == []
    assert "rollout.bundle.local" in loaded and "rollout.engine.run" in loaded  # it ran


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
