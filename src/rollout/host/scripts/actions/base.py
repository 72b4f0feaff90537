"""What every family of host actions shares: the report, the state folder, a release id,
reading a file or the status port."""

from __future__ import annotations

import json
import os
from typing import Any

# ruff: noqa: E501
# isort: off
from rollout.host.scripts.common import safe_open  # inlined on hosts
# isort: on

POLL = 0.05  # seconds between looks
STOPPED = (124, 137)  # timeout's status when it stopped the proof (TERM, KILL)


def _state_dir(root: str) -> str:
    return os.path.join(root, "rollout")


def _release_id_ok(release: str) -> bool:
    return bool(release) and "/" not in release and release not in (".", "..") \
        and not release.startswith(".")


def _report(outcome: str, reason: str, **data: Any) -> dict[str, Any]:
    return {"outcome": outcome, "reason": reason, **data}

def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _open_read(path: str) -> int | None:
    try:
        return safe_open(path, os.O_RDONLY)
    except OSError:
        return None


def _status_answer(url: str, timeout: float = 1.0) -> str | None:
    """The status port's answer (HTTP below 400), else None."""
    import http.client
    from urllib.parse import urlsplit

    parts = urlsplit(url)
    conn = http.client.HTTPConnection(parts.hostname or "127.0.0.1", parts.port or 80,
                                      timeout=timeout)
    try:
        conn.request("GET", parts.path or "/")
        reply = conn.getresponse()
        body = reply.read(1 << 20).decode("utf-8", "replace")
        return body if reply.status < 400 else None
    except (OSError, http.client.HTTPException):
        return None
    finally:
        conn.close()


def _status_doc(url: str) -> dict[str, Any] | None:
    answer = _status_answer(url) if url else None
    try:
        doc = json.loads(answer) if answer is not None else None
    except ValueError:
        return None
    return doc if isinstance(doc, dict) else None


def _read_at_most(path: str, limit: int) -> bytes | None:
    """The first `limit` bytes of a regular file (never through a link), None if none."""
    fd = _open_read(path)
    if fd is None:
        return None
    with os.fdopen(fd, "rb") as f:
        return f.read(limit)
