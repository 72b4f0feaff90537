"""Byte sizes for people: the parsing lives with the options (rollout.config.sections), the
formatting with the host scripts (the hosts say sizes the way the controller does)."""

from __future__ import annotations

from rollout.config.sections import parse_size
from rollout.host.scripts.common import format_size

__all__ = ["format_size", "parse_size"]
