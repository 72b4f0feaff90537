"""Secrets read from the environment by templates (`{{ secret('NAME') }}`), and their
redaction: a secret's value never appears in an event, a log line or a report.

A secret is known in every form it can take on its way out (as is, shell-quoted,
JSON-escaped, base64), and text is masked BEFORE it is cut to length, so no cut leaves
a prefix of a secret behind. The masking itself is rollout.masking (below rollout.errors,
which masks a failed command's output); this module decides what is a secret, and
re-exports the masking for the modules that print.
"""

from __future__ import annotations

import os

from rollout.errors import UserError
from rollout.masking import MASK, MIN_LENGTH, forms, head, redact, register, tail

__all__ = [
    "MASK", "MIN_LENGTH", "forms", "head", "redact", "register", "secret", "tail", "weakness",
]

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
