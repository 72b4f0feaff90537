"""Values never become shell text on the lab (issue 28): an inventory value inside any
shell-string command is refused at load, before any host is touched; the same value as an
argv item and an environment variable reaches the host byte for byte and runs nothing; a
value that starts with `-` is refused where the playbook declared no option."""

from __future__ import annotations

from pathlib import Path

import pytest

from .conftest import LabFleet
from .rollout_helpers import (
    FAST_KNOBS,
    fresh_fleet,
    inventory_with,
    lab_playbook_text,
    lab_playbook_with_validate,
    marks_made,
    rollout_args,
    run_cli,
    sh,
)

pytestmark = pytest.mark.lab
HOST = "lab-1"
MARKS = ("/tmp/hsa-rule-pwned", "/tmp/hsa-rule-pwned2", "/tmp/hsa-rule-pwned3")
HOSTILE = (f"$(touch {MARKS[0]});`touch {MARKS[1]}`'\"; touch {MARKS[2]} #"
           " {{ 7 * 7 }}")
SEEN = ("/tmp/hsa-rule-argv", "/tmp/hsa-rule-env")
SPELLINGS = [
    "echo {{ v }} | bash",
    "printf ''%s'' {{ v }} | sh",
    "echo x | xargs -I{} sh -c ''echo {} {{ v }}''",
    "trap ''echo {{ v }}'' EXIT; true",
    "echo {{ v }}",
]
BENCH = ("'{{ release_dir }}/cuzk-bench', -a, 'http://{{ daemon.listen }}', single, -t, porep,"
         " --c1, '{{ validate.input.path }}', --sector-num, '{{ c1_sector_num }}',"
         " --miner-id, '{{ c1_miner_id }}'")
SCRIPT = (f'printf %s "$1" > {SEEN[0]}; printf %s "$V" > {SEEN[1]}; shift; exec "$@"')
ARGV_ENV = (f"  command: [sh, -c, '{SCRIPT}', _, '{{{{ v }}}}', {BENCH}]\n"
            "  env: {V: '{{ v }}'}\n")


def playbook(work: Path, command: str) -> Path:
    """The lab playbook (usable from `work`) with `command` as its validate command lines."""
    text = lab_playbook_text().replace("  version: v1\n", "  version: v1\n  v: plain\n")
    return lab_playbook_with_validate(work, command, text=text)


@pytest.fixture(scope="module")
def fleet(lab_fleet: LabFleet) -> LabFleet:
    return fresh_fleet(lab_fleet, [HOST])


def no_marks_anywhere() -> list[str]:
    return marks_made(HOST, MARKS)


def hostile_inventory(work: Path, fleet: LabFleet) -> Path:
    value = HOSTILE.replace("\\", "\\\\").replace('"', '\\"')
    return inventory_with(work, fleet.fleet_path, HOST, f'v: "{value}"')


@pytest.mark.parametrize("spelling", SPELLINGS)
def test_an_inventory_value_in_a_shell_string_is_refused_before_any_host_is_touched(
    fleet: LabFleet, tmp_path: Path, spelling: str
) -> None:
    path = playbook(tmp_path, f"  command: '{spelling}'\n")
    before = sh(HOST, "readlink /data/current || true")
    run = run_cli(tmp_path, "rollout", "--hosts", str(hostile_inventory(tmp_path, fleet)),
                  "--playbook", str(path), "--limit", HOST, "--set", "version=hsa-r1")
    assert run.code == 2, run.stderr[-3000:]
    assert f"{path}:" in run.stderr and "validate.command" in run.stderr, run.stderr
    assert "a value from outside the playbook (v <- the inventory)" in run.stderr, run.stderr
    assert "env: {V: '{{ v }}'}" in run.stderr, run.stderr
    assert sh(HOST, "readlink /data/current || true") == before
    assert no_marks_anywhere() == []


def test_the_same_value_as_an_argv_item_and_in_env_reaches_the_host_byte_for_byte(
    fleet: LabFleet, tmp_path: Path
) -> None:
    assert no_marks_anywhere() == []
    run = run_cli(tmp_path, *rollout_args(hostile_inventory(tmp_path, fleet), "hsa-r2"),
                  "--limit", HOST, "--playbook", str(playbook(tmp_path, ARGV_ENV)),
                  "--set", f"lab_knobs={FAST_KNOBS}")
    assert run.code == 0, run.stderr[-3000:]
    assert run.host_end(HOST)["status"] == "validated", run.host_end(HOST)
    assert sh(HOST, f"cat {SEEN[0]}") == HOSTILE  # the exact value, one argument
    assert sh(HOST, f"cat {SEEN[1]}") == HOSTILE  # the exact value, from the environment
    assert no_marks_anywhere() == []


def test_a_value_that_starts_with_a_dash_is_refused_where_no_option_is_declared(
    fleet: LabFleet, tmp_path: Path
) -> None:
    before = sh(HOST, "readlink /data/current || true")
    run = run_cli(tmp_path, *rollout_args(fleet.fleet_path, "hsa-r3"), "--limit", HOST,
                  "--set", f"c1_miner_id=-c touch {MARKS[0]}")
    assert run.code == 2, run.stderr[-3000:]
    assert "lab.yaml:" in run.stderr and "validate.command[11]" in run.stderr, run.stderr
    assert "starts with '-'" in run.stderr and "c1_miner_id <- --set" in run.stderr
    assert sh(HOST, "readlink /data/current || true") == before
    assert no_marks_anywhere() == []
