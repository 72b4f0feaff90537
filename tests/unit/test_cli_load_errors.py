"""What used to crash a run with exit 70 is bad input found at load: exit 2, file:line.
(`rollout ARGV` in this process: the `cli` fixture of conftest.py.)"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from conftest import CliRunner

REPO = Path(__file__).resolve().parents[2]
INVENTORY = """\
defaults:
  known_hosts: known_hosts
hosts:
  - {name: a, address: 127.0.0.1, port: 1}
"""


def playbook_with(tmp_path: Path, old: str, new: str) -> tuple[Path, int]:
    text = (REPO / "playbooks" / "lab.yaml").read_text()
    line = text.splitlines().index(next(x for x in text.splitlines() if old in x)) + 1
    text = text.replace(old, new).replace("../dockerfiles", str(REPO / "dockerfiles"))
    text = text.replace("source: files/c1.json", f"source: {REPO}/playbooks/files/c1.json")
    text = text.replace("params_source: files/", f"params_source: {REPO}/playbooks/files/")
    path = tmp_path / "play.yaml"
    path.write_text(text)
    return path, line


@pytest.mark.parametrize(
    ("old", "new", "key"),
    [
        ("{name: drain, kind: drain, timeout: 600}", "{name: drain, kind: drain, timeout: .inf}",
         r"steps\[\d+\]\.timeout"),
        ("config_template: null", "config_template: missing.j2", r"daemon\.config_template"),
        ("source: files/c1.json", "source: files/missing.json", r"validate\.input\.source"),
    ],
)
def test_load_errors_exit_2_naming_file_line_key(
    cli: CliRunner, tmp_path: Path, old: str, new: str, key: str
) -> None:
    (tmp_path / "fleet.yaml").write_text(INVENTORY)
    playbook, line = playbook_with(tmp_path, old, new)
    p = cli("rollout", "--hosts", str(tmp_path / "fleet.yaml"), "--playbook", str(playbook),
            cwd=tmp_path)  # fmt: skip
    assert p.returncode == 2, p.stderr
    assert re.search(f"{re.escape(str(playbook))}:{line}: {key}:", p.stderr), p.stderr


def test_a_known_hosts_folder_exits_2(cli: CliRunner, tmp_path: Path) -> None:
    (tmp_path / "fleet.yaml").write_text(INVENTORY)
    (tmp_path / "known_hosts").mkdir()
    p = cli("rollout", "--hosts", str(tmp_path / "fleet.yaml"), cwd=tmp_path)
    assert p.returncode == 2, p.stderr
    assert f"{tmp_path / 'fleet.yaml'}:2: defaults.known_hosts" in p.stderr
