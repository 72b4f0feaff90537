"""`inv bench --simulate`: a --concurrency rolling.concurrency would refuse is refused up
front, naming the flag (exit 2), never blamed on the lab playbook's key after a start."""

from __future__ import annotations

import pytest
from invoke.context import Context
from invoke.exceptions import Exit

from rollout.bench import simulate
from rollout.cli import bench_tasks


@pytest.mark.parametrize("value", [-1, 1025, 10**9])
def test_a_concurrency_outside_its_bounds_is_refused_naming_the_flag(
        value: int, monkeypatch: pytest.MonkeyPatch) -> None:
    def never(*args: object, **kwargs: object) -> None:
        raise AssertionError("the simulation started")

    monkeypatch.setattr(simulate, "fleet_sizes", never)
    with pytest.raises(Exit) as refused:
        bench_tasks.bench(Context(), simulate="100", concurrency=value)
    assert refused.value.code == 2
    assert f"--concurrency {value}: use 1 to 1024" in str(refused.value.message)


def test_a_concurrency_within_its_bounds_or_zero_is_taken() -> None:
    assert bench_tasks._concurrency(0) is None
    assert bench_tasks._concurrency(1) == 1 and bench_tasks._concurrency(1024) == 1024
