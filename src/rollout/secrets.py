"""Secrets read from the environment by templates (`{{ secret('NAME') }}`), and their
redaction: a secret's value never appears in an event, a log line or a report.

A secret is known in every form it can take on its way out (as is, shell-quoted,
JSON-escaped, base64), and text is masked BEFORE it is cut to length, so no cut leaves
a prefix of a secret behind.
"""

from __future__ import annotations

import base64
import json
import os
import threading
from typing import Any

from rollout.errors import UserError

_known: set[str] = set()
_lock = threading.Lock()
MASK = "********"
MIN_LENGTH = 4
"""Shorter forms are not masked (they would mask ordinary text)."""
SECRET_MIN_LENGTH = 8
"""A `secret('NAME')` shorter than this is refused: too short to mask safely."""
SECRET_MIN_WORD = 12
"""A secret of letters only must be at least this long: a short word (`release`,
`current`) would mask ordinary text, every path that holds it."""
SECRET_MIN_DISTINCT = 4
"""A secret needs this many different characters (`aaaaaaaa` is no secret)."""


def weakness(value: str) -> str | None:
    """Why a value is too weak to be a secret that rollout can mask, or None.

    Masking replaces a secret wherever it appears, inside words too, so that no form of it
    ever leaks; a short or common value would then hide ordinary text (paths, names). Such
    a value is refused instead of masked partly (whole words only) or not at all."""
    if len(value) < SECRET_MIN_LENGTH:
        return f"it has {len(value)} characters, fewer than {SECRET_MIN_LENGTH}"
    if len(set(value)) < SECRET_MIN_DISTINCT:
        return f"it has fewer than {SECRET_MIN_DISTINCT} different characters"
    if value.isalpha() and len(value) < SECRET_MIN_WORD:
        return f"it is a word of letters only, shorter than {SECRET_MIN_WORD} characters"
    return None


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


def secret(name: str) -> str:
    """The value of environment variable NAME, remembered so that it is redacted."""
    value = os.environ.get(name)
    if value is None:
        raise UserError(f"secret({name!r}): environment variable {name} is not set")
    weak = weakness(value)
    if weak is not None:
        raise UserError(
            f"secret({name!r}): refused, too weak to mask safely: {weak} (masking it would "
            "hide ordinary text wherever it appears, and a partial mask would leak it)"
        )
    register(value)
    return value


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
