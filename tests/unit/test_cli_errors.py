"""Bad input exits 2 with a message naming the file, line and key, before touching a host.
(`rollout ARGV` in this process: the `cli` fixture of conftest.py.)"""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import CliResult, CliRunner

REPO = Path(__file__).resolve().parents[2]
GOOD_INVENTORY = """\
defaults:
  user: root
hosts:
  - name: a
    address: 127.0.0.1
    port: 1
"""


@pytest.fixture
def run(cli: CliRunner, tmp_path: Path) -> CliRunner:
    def in_tmp(*args: str) -> CliResult:
        return cli(*args, cwd=tmp_path)

    return in_tmp


def test_bad_inventory_type_exits_2_naming_file_line_key(run: CliRunner, tmp_path: Path) -> None:
    inventory = tmp_path / "fleet.yaml"
    inventory.write_text(GOOD_INVENTORY.replace("port: 1", "port: twenty-two"))
    p = run("rollout", "--hosts", str(inventory))
    assert p.returncode == 2, p.stderr
    assert f"{inventory}:6: hosts[0].port" in p.stderr


def test_unknown_inventory_key_exits_2(run: CliRunner, tmp_path: Path) -> None:
    inventory = tmp_path / "fleet.yaml"
    inventory.write_text(GOOD_INVENTORY.replace("  user: root", "  usr: root"))
    p = run("rollout", "--hosts", str(inventory))
    assert p.returncode == 2, p.stderr
    assert f"{inventory}:2: defaults.usr" in p.stderr


def test_bad_playbook_exits_2_naming_file_line_key(run: CliRunner, tmp_path: Path) -> None:
    inventory = tmp_path / "fleet.yaml"
    inventory.write_text(GOOD_INVENTORY)
    playbook = tmp_path / "play.yaml"
    text = (REPO / "playbooks" / "rollout.yaml").read_text()
    playbook.write_text(text.replace("  keep: 3", "  keep: many"))
    line = text.splitlines().index("  keep: 3") + 1
    p = run("rollout", "--hosts", str(inventory), "--playbook", str(playbook))
    assert p.returncode == 2, p.stderr
    assert f"{playbook}:{line}: release.keep" in p.stderr


def test_bad_set_option_exits_2(run: CliRunner, tmp_path: Path) -> None:
    inventory = tmp_path / "fleet.yaml"
    inventory.write_text(GOOD_INVENTORY)
    p = run("rollout", "--hosts", str(inventory), "--set", "novalue")
    assert p.returncode == 2
    assert "KEY=VALUE" in p.stderr


def test_missing_inventory_exits_2(run: CliRunner, tmp_path: Path) -> None:
    p = run("rollout", "--hosts", str(tmp_path / "nope.yaml"))
    assert p.returncode == 2
    assert "nope.yaml" in p.stderr
