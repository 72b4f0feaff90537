"""Values never become code on the lab (issue 18): a validation command written as an argv
list, and a value passed through `validate.env`, carry a hostile `--set` value into the
host's validation inert; the run validates, no file appears on a host or the controller."""

from __future__ import annotations

from pathlib import Path

import pytest

from .conftest import LabFleet
from .rollout_helpers import (
    FAST_KNOBS,
    fresh_fleet,
    lab_playbook_with_validate,
    marks_made,
    rollout_args,
    run_cli,
    sh,
)

pytestmark = pytest.mark.lab
HOST = "lab-1"
MARKS = ("/tmp/h-nst-pwned", "/tmp/h-nst-pwned2", "/tmp/h-nst-pwned3")
HOSTILE = (f"$(touch {MARKS[0]});`touch {MARKS[1]}`'\"; touch {MARKS[2]} #"
           " {{ 7 * 7 }}")
SEEN = ("/tmp/h-nst-argv", "/tmp/h-nst-env")
# The script of sh -c holds no placeholder: the hostile value comes in as "$1" (an argv
# item) and as "$HOSTILE" (validate.env), then the bench runs as the rest of the argv.
SCRIPT = (f'printf %s "$1" > {SEEN[0]}; printf %s "$HOSTILE" > {SEEN[1]}; '
          'shift; exec "$@"')
COMMAND = (
    "  command: [sh, -c, '" + SCRIPT.replace("'", "''") + "', _, '{{ hostile }}',"
    " '{{ release_dir }}/cuzk-bench', -a, 'http://{{ daemon.listen }}', single, -t, porep,"
    " --c1, '{{ validate.input.path }}', --sector-num, '{{ c1_sector_num }}',"
    " --miner-id, '{{ c1_miner_id }}']\n"
    "  env: {HOSTILE: '{{ hostile }}'}\n"
)


def playbook(work: Path) -> Path:
    return lab_playbook_with_validate(work, COMMAND, "argv-env.yaml")


@pytest.fixture(scope="module")
def fleet(lab_fleet: LabFleet) -> LabFleet:
    return fresh_fleet(lab_fleet, [HOST])


def no_marks_anywhere() -> list[str]:
    return marks_made(HOST, MARKS)


def test_an_argv_list_and_env_values_carry_a_hostile_value_inert(
    fleet: LabFleet, tmp_path: Path
) -> None:
    assert no_marks_anywhere() == []
    run = run_cli(tmp_path, *rollout_args(fleet.fleet_path, "nst-1"), "--limit", HOST,
                  "--playbook", str(playbook(tmp_path)), "--set", f"lab_knobs={FAST_KNOBS}",
                  "--set", f"hostile={HOSTILE}")
    assert run.code == 0, run.stderr[-3000:]
    assert run.steps(HOST)["validate"]["status"] in ("ok", "changed"), run.steps(HOST)
    assert run.host_end(HOST)["status"] == "validated", run.host_end(HOST)
    assert sh(HOST, f"cat {SEEN[0]}") == HOSTILE  # the exact value, one argument
    assert sh(HOST, f"cat {SEEN[1]}") == HOSTILE  # the exact value, from the environment
    assert no_marks_anywhere() == []


def test_the_same_value_inside_sh_c_is_refused_before_any_host_is_touched(
    fleet: LabFleet, tmp_path: Path
) -> None:
    path = playbook(tmp_path)
    text = path.read_text().replace("'printf %s \"$1\"", "'printf %s {{ hostile }}", 1)
    path.write_text(text)
    before = sh(HOST, "readlink /data/current || true")
    run = run_cli(tmp_path, *rollout_args(fleet.fleet_path, "nst-2"), "--limit", HOST,
                  "--playbook", str(path), "--set", f"hostile={HOSTILE}")
    assert run.code == 2, run.stderr[-3000:]
    assert "read again by sh -c" in run.stderr and "env: {V:" in run.stderr, run.stderr
    assert "hostile <- --set" in run.stderr, run.stderr  # an outside value (issue 28)
    assert f"{path}:" in run.stderr
    assert sh(HOST, "readlink /data/current || true") == before
    assert no_marks_anywhere() == []
