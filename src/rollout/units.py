"""Byte sizes for people: the parsing lives with the options (rollout.config.sections)."""

from __future__ import annotations

from rollout.config.sections import parse_size

__all__ = ["format_size", "parse_size"]


def format_size(n: int | None) -> str:
    if n is None:
        return "-"
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return f"{n:.0f}{unit}" if unit == "B" else f"{n:.1f}{unit}"
        n = n / 1024  # type: ignore[assignment]
    return str(n)
