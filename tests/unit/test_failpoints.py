"""Park points: a host's park point holds that host alone, and only where it is armed."""

from __future__ import annotations

from pathlib import Path

import pytest

from rollout import failpoints


@pytest.fixture
def armed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("ROLLOUT_FAILPOINTS", "park-before-drain@lab-3")
    monkeypatch.setenv("ROLLOUT_PARK_DIR", str(tmp_path))
    monkeypatch.setattr(failpoints, "_remaining", None)
    return tmp_path


def test_a_host_park_point_holds_only_its_host(armed: Path) -> None:
    announced: list[tuple[str, str]] = []
    for where in ("controller", "lab-1", "lab-2"):
        failpoints.park("park-before-drain", lambda n, g: announced.append((n, g)), where)
    failpoints.park("park-before-stop", lambda n, g: announced.append((n, g)), "lab-3")
    assert announced == []


def test_a_parked_host_announces_its_go_file_and_waits_for_it(armed: Path) -> None:
    go = armed / "park-before-drain.go"
    announced: list[tuple[str, str]] = []

    def announce(name: str, path: str) -> None:
        announced.append((name, path))
        Path(path).touch()  # the test's side: released once the run said where it waits

    failpoints.park("park-before-drain", announce, "lab-3")
    assert announced == [("park-before-drain", str(go))]
    failpoints.park("park-before-drain", announce, "lab-3")  # armed once: used up
    assert len(announced) == 1
