"""Masking: every known secret value is replaced by MASK in every form it can take on its
way out (as is, shell-quoted, JSON-escaped, base64), and text is masked BEFORE it is cut to
length, so no cut leaves a prefix of a secret behind.

Below every other module (errors.py masks a failed command's output with it); which values
are secrets, and which are too weak to be, is rollout.secrets' business.
"""

from __future__ import annotations

import base64
import json
import threading
from typing import Any

_known: set[str] = set()
_lock = threading.Lock()
MASK = "********"
MIN_LENGTH = 4
"""Shorter forms are not masked (they would mask ordinary text)."""


def forms(value: str) -> set[str]:
    """The forms a value takes in commands, JSON and encoded files."""
    quoted = value.replace("'", "'\"'\"'")  # inside shlex.quote's single quotes
    encoded = base64.b64encode(value.encode()).decode()
    escaped = json.dumps(value)[1:-1]
    candidates = {value, quoted, escaped, json.dumps(quoted)[1:-1], encoded, encoded.rstrip("=")}
    return {form for form in candidates if len(form) >= MIN_LENGTH}


def register(value: str) -> None:
    """Mask `value` (in all its forms) from now on."""
    if len(value) >= MIN_LENGTH:
        with _lock:
            _known.update(forms(value))


def redact(value: Any) -> Any:
    """The same data with every known secret masked, at any depth."""
    if not _known:
        return value
    if isinstance(value, str):
        for known in sorted(_known, key=len, reverse=True):
            value = value.replace(known, MASK)
        return value
    if isinstance(value, dict):
        return {k: redact(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return type(value)(redact(v) for v in value)
    return value


def head(text: str, length: int) -> str:
    """The first `length` characters of `text`, masked before the cut."""
    return str(redact(text))[:length]


def tail(text: str, length: int) -> str:
    """The last `length` characters of `text`, masked before the cut."""
    return str(redact(text))[-length:]
