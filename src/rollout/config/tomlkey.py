"""TOML keys from hostile data: a key (or table name) that templates and vars write into the
daemon's TOML is left bare only when TOML's bare-key rule allows it, else quoted as a basic
string, so a key can never close a table header, start a new line or add a key of its own."""

from __future__ import annotations

import re
from typing import Any

_BARE = re.compile(r"^[A-Za-z0-9_-]+$")


def _escaped(char: str) -> str:
    if char in '"\\':
        return "\\" + char
    if ord(char) < 0x20 or ord(char) == 0x7F:  # control characters: \uXXXX, as TOML allows
        return f"\\u{ord(char):04x}"
    return char


def toml_key(key: Any) -> str:
    """`key` as a TOML key: bare (A-Za-z0-9_-) or a quoted basic string."""
    text = str(key)
    if _BARE.match(text):
        return text
    return '"' + "".join(_escaped(c) for c in text) + '"'
