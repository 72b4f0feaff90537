"""The lab is busy by default (issue 17): `lab.up` starts every host with the curio-like
sidecar's settings, `--quiet-hosts` with none, and the lab playbook cordons with curio as a
real fleet's would. No Docker: the host's starting files and the task's call are checked."""

from __future__ import annotations

import io
import json
import sys
import tarfile
from pathlib import Path
from typing import Any

import pytest

import rollout.cli
from rollout import lab
from rollout.config.playbook import LAB_PLAYBOOK
from rollout.lab.fleet import BUSY_SIDECAR, SIDECAR_SETTINGS, _secrets_tar
from rollout.lab.keys import new_host_key
from rollout.lab.sidecar import KEYS, _checked
from rollout.steps.kinds import load_playbook


def files_of(archive: bytes) -> dict[str, bytes]:
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        return {m.name: tar.extractfile(m).read() for m in tar.getmembers()}  # type: ignore[union-attr]


def test_the_busy_settings_are_the_sidecars_own_data() -> None:
    assert set(BUSY_SIDECAR) <= set(KEYS)
    assert _checked(BUSY_SIDECAR) == BUSY_SIDECAR
    assert BUSY_SIDECAR["pause_secs"] > 0 and BUSY_SIDECAR["concurrency"] == 1  # modest
    assert 0 < BUSY_SIDECAR["hold_mib"] <= 16  # small beside a 512 MiB host


def test_a_busy_host_starts_with_the_sidecars_settings_a_quiet_one_without() -> None:
    key = new_host_key("lab-1")
    settings = json.dumps(BUSY_SIDECAR).encode()
    busy = files_of(_secrets_tar(key, "ssh-ed25519 AAAA lab", settings))
    assert json.loads(busy[SIDECAR_SETTINGS.lstrip("/")]) == BUSY_SIDECAR
    quiet = files_of(_secrets_tar(key, "ssh-ed25519 AAAA lab", None))
    assert SIDECAR_SETTINGS.lstrip("/") not in quiet
    assert set(busy) - set(quiet) == {SIDECAR_SETTINGS.lstrip("/")}


@pytest.mark.parametrize(("argv", "busy"), [((), True), (("--quiet-hosts",), False)])
def test_lab_up_is_busy_unless_told_quiet(
    argv: tuple[str, ...], busy: bool, monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:  # fmt: skip
    calls: list[dict[str, Any]] = []

    def fake_up(**kwargs: Any) -> Path:
        calls.append(kwargs)
        return Path("/nowhere/fleet.yaml")

    monkeypatch.setattr(lab, "up", fake_up)
    monkeypatch.setattr(sys, "argv", ["rollout", "lab.up", *argv])
    rollout.cli.program.run(["rollout", "lab.up", *argv], exit=False)
    assert calls == [{"hosts": 3, "memory": "512m", "busy": busy}]
    assert ("busy" if busy else "quiet") in capsys.readouterr().out


def test_the_lab_playbook_cordons_with_curio_and_waits_for_its_proofs() -> None:
    work = load_playbook(LAB_PLAYBOOK).work
    assert (work.cordon, work.uncordon) == ("curio cordon", "curio uncordon")
    assert work.at_deadline == "stop" and 0 < work.deadline <= 60  # a lab proof takes < 1 s
    told = load_playbook(LAB_PLAYBOOK, overrides={"work_deadline": 5, "at_deadline": "skip"})
    assert (told.work.deadline, told.work.at_deadline) == (5, "skip")
