from __future__ import annotations

import pytest

from rollout.config.batches import Serial, batches, max_fail_exceeded, parse_serial

HOSTS = [f"h{i}" for i in range(10)]


def sizes(serial: Serial, total: int = 10) -> list[int]:
    return [len(b) for b in batches(list(range(total)), serial)]


@pytest.mark.parametrize(
    ("serial", "expected"),
    [
        (1, [1] * 10),
        (3, [3, 3, 3, 1]),
        (20, [10]),
        ("25%", [3, 3, 3, 1]),  # ceil(2.5)
        ("100%", [10]),
        ("1%", [1] * 10),  # at least one host per batch
        ([1, "100%"], [1, 9]),
        ([1, 2], [1, 2, 2, 2, 2, 1]),  # the last size repeats
        ([1, 3, "50%"], [1, 3, 5, 1]),
        ("5", [5, 5]),
    ],
)
def test_batch_sizes(serial: Serial, expected: list[int]) -> None:
    assert sizes(serial) == expected


def test_batches_keep_order_and_place_every_host() -> None:
    result = batches(HOSTS, [1, "30%"])
    assert result[0] == ["h0"]
    assert [h for batch in result for h in batch] == HOSTS


def test_no_hosts() -> None:
    assert batches([], [1, "100%"]) == []


@pytest.mark.parametrize("serial", [0, -1, "0%", "101%", "abc", [], [1, "x"], 1.5, True, None])
def test_bad_serial(serial: object) -> None:
    with pytest.raises(ValueError):
        parse_serial(serial)


def test_parse_serial_normalises() -> None:
    assert parse_serial(["2", " 25 %", 1]) == [2, "25%", 1]


@pytest.mark.parametrize(
    ("failed", "total", "pct", "exceeded"),
    [
        (0, 10, 0, False),
        (1, 10, 0, True),
        (1, 10, 10, False),
        (2, 10, 10, True),
        (1, 3, 33, True),
        (1, 3, 34, False),
        (0, 0, 0, False),
        (5, 5, 100, False),
    ],
)
def test_max_fail_exceeded(failed: int, total: int, pct: float, exceeded: bool) -> None:
    assert max_fail_exceeded(failed, total, pct) is exceeded
