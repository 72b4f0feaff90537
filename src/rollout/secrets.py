"""Secrets read from the environment by templates (`{{ secret('NAME') }}`), and their
redaction: a secret's value never appears in an event, a log line or a report."""

from __future__ import annotations

import os
import threading
from typing import Any

from rollout.errors import UserError

_known: set[str] = set()
_lock = threading.Lock()
MASK = "********"


def secret(name: str) -> str:
    """The value of environment variable NAME, remembered so that it is redacted."""
    value = os.environ.get(name)
    if value is None:
        raise UserError(f"secret({name!r}): environment variable {name} is not set")
    if len(value) >= 4:  # shorter values would mask ordinary text
        with _lock:
            _known.add(value)
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
