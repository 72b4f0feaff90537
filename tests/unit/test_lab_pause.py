"""The lab's pause tries a freeze again while the cgroup freezer cannot settle (a loaded
machine), and only then: other errors go up at once, and the tries are bounded."""

from __future__ import annotations

from typing import Any

import pytest
from docker.errors import APIError

from rollout.errors import EnvironmentProblem
from rollout.lab.fleet import FREEZE_ATTEMPTS, pause_container

FREEZE = "Cannot pause container 0123: OCI runtime pause failed: unable to freeze: unknown"


class FakeContainer:
    """Fails its first pauses with the given errors; `settles` says whether Docker reports
    it paused after a failed one."""

    name = "h16-lab-2"

    def __init__(self, errors: list[str], settles: bool = False) -> None:
        self.errors = list(errors)
        self.settles = settles
        self.status = "running"
        self.pauses = 0

    def pause(self) -> None:
        self.pauses += 1
        if self.errors:
            raise APIError(self.errors.pop(0))
        self.status = "paused"

    def reload(self) -> None:
        if self.settles:
            self.status = "paused"


def pause(container: FakeContainer) -> list[float]:
    slept: list[float] = []
    fake: Any = container
    pause_container(fake, sleep=slept.append)
    return slept


def test_a_freeze_that_did_not_settle_is_tried_again_until_paused() -> None:
    container = FakeContainer([FREEZE] * 3)
    slept = pause(container)
    assert container.pauses == 4 and container.status == "paused"
    assert len(slept) == 3 and all(0 < s <= 1.0 for s in slept)


def test_a_failed_pause_that_settled_is_not_paused_again() -> None:
    container = FakeContainer([FREEZE], settles=True)
    assert pause(container) == []
    assert container.pauses == 1 and container.status == "paused"


def test_other_docker_errors_are_not_retried() -> None:
    container = FakeContainer(["Container 0123 is not running"])
    with pytest.raises(APIError, match="is not running"):
        pause(container)
    assert container.pauses == 1


def test_the_tries_are_bounded_and_end_in_an_environment_problem() -> None:
    container = FakeContainer([FREEZE] * (FREEZE_ATTEMPTS + 5))
    with pytest.raises(EnvironmentProblem, match=r"h16-lab-2.*did not settle.*unable to freeze"):
        pause(container)
    assert container.pauses == FREEZE_ATTEMPTS and container.status == "running"
