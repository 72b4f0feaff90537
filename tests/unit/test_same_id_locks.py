"""Two inventory entries with one host id (issue 28): both are refused, and every lock the
run took is given back, whether they are one machine under two names or two machines whose
/data/rollout/host-id is the same (a cloned disk)."""

from __future__ import annotations

from pathlib import Path

import pytest
from test_locks import Recorder, lock_file, me
from test_one_machine import _lock_on, context

from rollout.engine.locks import LockPolicy, fleet_locks, holder_for

CLONED_ID = "0123456789abcdef0123456789abcdef"


def clone_id(tmp: Path, *folders: str) -> None:
    for folder in folders:
        (tmp / folder / "rollout").mkdir(parents=True)
        (tmp / folder / "rollout" / "host-id").write_text(CLONED_ID + "\n")


@pytest.mark.parametrize("folders", [("m1", "m1"), ("m1", "m3")], ids=["one", "cloned"])
def test_no_lock_stays_after_a_same_id_refusal(tmp_path: Path, folders: tuple[str, str]
                                              ) -> None:
    clone_id(tmp_path, *sorted(set(folders)))
    names = {"h1": folders[0], "h2": "m2", "h3": folders[1]}
    rec = Recorder()
    with fleet_locks(list(names), lambda n: context(tmp_path, n, names[n]), me(), LockPolicy(),
                     rec.events()) as locks:
        assert sorted(locks.refused) == ["h1", "h3"] and list(locks.held) == ["h2"]
        for folder in set(folders):
            assert not lock_file(tmp_path, folder).exists(), f"{folder}: a lock stays"
        assert lock_file(tmp_path, "m2").exists()
    assert not [p for p in tmp_path.glob("*/rollout/lock")]


def test_the_engine_leaves_no_lock_on_two_machines_sharing_an_id(tmp_path: Path) -> None:
    from test_engine import Fleet

    fleet = Fleet(tmp_path, ["h1", "h2", "h3"])
    folders = {"h1": "m1", "h2": "m2", "h3": "m3"}
    clone_id(tmp_path, "m1", "m3")
    for n, host in fleet.hosts.items():  # the lock script runs for real, on each folder
        host.call = _lock_on(host, tmp_path / folders[n])  # type: ignore[method-assign]
    summary = fleet.roll("bbbbbbbbbbbb", holder=holder_for("r1", "op", "ctl", "v"))
    assert summary.exit_code == 1
    for name in ("h1", "h3"):
        assert summary.outcomes[name].status == "failed", summary.outcomes[name]
        assert "same machine" in summary.outcomes[name].reason
        assert not fleet.hosts[name].sent, f"{name} was touched"
    assert not [p for p in tmp_path.glob("*/rollout/lock")], "a lock stays after the run"
