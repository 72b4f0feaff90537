"""Rolling batches (Ansible `serial` semantics) and the failure budget."""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from typing import TypeVar

T = TypeVar("T")

BatchSize = int | str
"""A host count (`2`) or a share of all hosts (`"25%"`)."""
Serial = BatchSize | Sequence[BatchSize]

_PERCENT = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*%\s*$")


def parse_serial(serial: object) -> list[BatchSize]:
    """Check and normalise `serial` to a non-empty list of ints >= 1 and "N%" strings.

    Raises ValueError with a message fit for the user.
    """
    items = list(serial) if isinstance(serial, list | tuple) else [serial]
    if not items:
        raise ValueError("serial must not be an empty list")
    return [_parse_size(item) for item in items]


def _parse_size(item: object) -> BatchSize:
    if isinstance(item, str) and item.strip().isdigit():
        item = int(item)
    if isinstance(item, int) and not isinstance(item, bool):
        if item < 1:
            raise ValueError(f"batch size must be at least 1, got {item}")
        return item
    match = _PERCENT.match(item) if isinstance(item, str) else None
    if match is None:
        raise ValueError(f"batch size must be a host count or a share like '25%', got {item!r}")
    share = float(match.group(1))
    if not 0 < share <= 100:
        raise ValueError(f"batch percentage must be in (0, 100], got {item!r}")
    return f"{match.group(1)}%"


def batch_size(size: BatchSize, total: int) -> int:
    """Hosts in one batch: an int as is, "N%" = ceil(N% of total), at least 1."""
    if isinstance(size, int):
        return size
    share = float(size.rstrip("%"))
    return max(1, math.ceil(total * share / 100))


def batches(hosts: Sequence[T], serial: Serial) -> list[list[T]]:
    """Split `hosts` into successive batches; the first one is the canary.

    `serial` is an int, "25%", or a list of those: successive batch sizes, the last
    repeated until every host is placed. Raises ValueError for a bad `serial`.
    """
    sizes = parse_serial(serial)
    out: list[list[T]] = []
    start = 0
    while start < len(hosts):
        size = batch_size(sizes[min(len(out), len(sizes) - 1)], len(hosts))
        out.append(list(hosts[start : start + size]))
        start += size
    return out


def max_fail_exceeded(failed: int, total: int, max_fail_percentage: float) -> bool:
    """True when the failed hosts are more than `max_fail_percentage` of `total`."""
    if total <= 0:
        return False
    return failed * 100 / total > max_fail_percentage
