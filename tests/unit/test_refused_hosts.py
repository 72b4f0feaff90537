"""One bad source fails only its host (issue 28): a host_vars or group_vars file that cannot
be read (a link out of the inventory's folder, a FIFO), or a hostile vast.ai row, refuses
the hosts it gives vars to, each with why; the rest of the fleet loads, rolls and ends as
it would, and the refused host ends failed (exit 1), never contacted."""

from __future__ import annotations

import os
from dataclasses import replace
from pathlib import Path

import pytest
from conftest import CliRunner
from test_engine import OLD, Fleet, release

from rollout.config.inventory import load_inventory
from rollout.config.playbook import LAB_PLAYBOOK
from rollout.engine.run import Engine, EngineOptions
from rollout.errors import ConfigError, UserError
from rollout.output.events import Event, EventBus


def ansible(tmp_path: Path) -> Path:
    (tmp_path / "hosts").write_text(
        "[gpu]\nh1 ansible_host=127.0.0.1\nh2 ansible_host=127.0.0.1\n"
        "[cpu]\nh3 ansible_host=127.0.0.1\n")
    (tmp_path / "host_vars").mkdir()
    (tmp_path / "group_vars").mkdir()
    return tmp_path / "hosts"


def test_an_unreadable_host_vars_file_refuses_that_host_alone(tmp_path: Path) -> None:
    hosts = ansible(tmp_path)
    os.symlink("/etc/shadow", tmp_path / "host_vars" / "h2.yml")
    inventory = load_inventory(hosts)
    assert [h.name for h in inventory.hosts] == ["h1", "h3"]
    assert list(inventory.refused) == ["h2"]
    assert "host_vars/h2.yml" in inventory.refused["h2"]
    assert "leads out of" in inventory.refused["h2"]
    with pytest.raises(UserError, match="host h2 is refused: .*h2.yml"):
        inventory.get("h2")


def test_an_unreadable_group_vars_file_refuses_its_groups_hosts(tmp_path: Path) -> None:
    hosts = ansible(tmp_path)
    os.mkfifo(tmp_path / "group_vars" / "gpu.yml")
    inventory = load_inventory(hosts)
    assert [h.name for h in inventory.hosts] == ["h3"]
    assert sorted(inventory.refused) == ["h1", "h2"]
    assert "not a file nor a folder" in inventory.refused["h1"]


def test_a_malformed_vars_file_is_still_the_operators_error_at_its_line(tmp_path: Path) -> None:
    """A file that reads but says nothing valid is a mistake to fix before any host moves:
    exit 2 naming its file and line, as before."""
    hosts = ansible(tmp_path)
    (tmp_path / "host_vars" / "h2.yml").write_text("- a list\n")
    with pytest.raises(ConfigError) as info:
        load_inventory(hosts)
    assert info.value.location is not None and info.value.location.file.endswith("h2.yml")


def test_no_host_left_is_an_error_naming_why(tmp_path: Path) -> None:
    hosts = ansible(tmp_path)
    os.symlink("/etc/shadow", tmp_path / "group_vars" / "all.yml")
    with pytest.raises(ConfigError, match="no host left: h1 is refused: .*all.yml"):
        load_inventory(hosts)


def test_a_refused_host_ends_failed_and_the_others_roll(tmp_path: Path) -> None:
    fleet = Fleet(tmp_path, ["h1", "h2", "h3"]).serving(OLD)
    plan = fleet.plan()
    why = "host_vars/h4.yml: vars file is a FIFO, not a regular file"
    plan = replace(plan, refused={"h4": why})
    events: list[Event] = []
    bus = EventBus(plan.run_id)
    bus.subscribe(events.append)
    contacted: list[str] = []

    def connect(host):  # type: ignore[no-untyped-def]
        contacted.append(host.name)
        return fleet.hosts[host.name]

    options = EngineOptions(release=release(tmp_path, "new"))
    summary = Engine(plan, bus, connect, tmp_path, options).run()
    assert summary.exit_code == 1
    assert summary.outcomes["h4"].status == "failed" and summary.outcomes["h4"].reason == why
    assert all(summary.outcomes[h].status == "validated" for h in ("h1", "h2", "h3"))
    assert "h4" not in contacted
    ends = [(e.host, e.status) for e in events if e.kind == "host_end"]
    assert ("h4", "failed") in ends


def test_the_inventory_view_names_a_refused_host_and_why(tmp_path: Path) -> None:
    from rollout.commands.inventory_view import describe

    hosts = ansible(tmp_path)
    os.symlink("/etc/shadow", tmp_path / "host_vars" / "h2.yml")
    view = describe(str(hosts))
    assert sorted(view.hosts) == ["h1", "h3"]
    assert any(n.startswith("h2: refused, the other hosts go on: ") and "h2.yml" in n
               for n in view.notes)


def test_a_single_step_on_a_refused_host_says_why_and_does_nothing(
        tmp_path: Path, cli: CliRunner) -> None:
    hosts = ansible(tmp_path)
    os.symlink("/etc/shadow", tmp_path / "host_vars" / "h2.yml")
    run = cli("stop", "h2", "--hosts", str(hosts), "--playbook", str(LAB_PLAYBOOK))
    assert run.returncode == 2
    assert "host h2 is refused: " in run.stderr and "h2.yml" in run.stderr
    assert "Traceback" not in run.stderr
