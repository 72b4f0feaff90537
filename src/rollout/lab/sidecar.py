"""The curio-like sidecar of a lab host (`/usr/local/bin/curio`, kept running by lab-init):
turned on and off per host, its cordon state and the proofs it submitted, read back.

A lab fleet brought up busy (`up(busy=True)`, the default) starts every host with the
settings BUSY_SIDECAR; a quiet one (`rollout lab.up --quiet-hosts`) runs no sidecar until
`set_sidecar(name, {...})` writes its settings file; `set_sidecar(name, None)` removes it and
the sidecar leaves. Every value is data: the
settings are one JSON document that the sidecar reads, each value coerced to its type.
"""

from __future__ import annotations

import io
import json
import tarfile
import time
from collections.abc import Mapping
from typing import Any

from rollout.errors import UserError
from rollout.lab.fleet import SIDECAR_SETTINGS, _container, exec_on, read_on

SETTINGS = SIDECAR_SETTINGS
CORDONED = "/var/lib/lab-curio/cordoned"
EVENTS = "/var/log/lab-curio.jsonl"
KEYS: dict[str, type | tuple[type, ...]] = {
    "addr": str, "c1": str, "sector_num": int, "miner_id": int, "hold_mib": int,
    "pause_secs": (int, float), "concurrency": int, "cordon_poll_secs": (int, float),
    "proof_type": str, "late_claims": int,
}  # fmt: skip
"""What the sidecar reads, with its type; its defaults are in the sidecar (curio run)."""


def _checked(settings: Mapping[str, Any]) -> dict[str, Any]:
    for key, value in settings.items():
        kind = KEYS.get(key)
        if kind is None:
            raise UserError(f"sidecar setting {key!r}: not one of {', '.join(sorted(KEYS))}")
        if isinstance(value, bool) or not isinstance(value, kind):
            raise UserError(f"sidecar setting {key!r}: {value!r} is not of the right type")
    return dict(settings)


def set_sidecar(name: str, settings: Mapping[str, Any] | None) -> None:
    """Turn the sidecar of lab host `name` on with these settings (an empty mapping: the
    defaults), or off with None. Written through the archive API: nothing runs in the host
    to write it, and lab-init starts the sidecar within a second."""
    container = _container(name)
    if settings is None:
        exec_on(name, ["rm", "-f", SETTINGS])
        return
    data = json.dumps(_checked(settings)).encode()
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        info = tarfile.TarInfo(SETTINGS.lstrip("/"))
        info.size, info.mode, info.mtime = len(data), 0o644, int(time.time())
        tar.addfile(info, io.BytesIO(data))
    container.put_archive("/", buf.getvalue())


def sidecar_events(name: str) -> list[dict[str, Any]]:
    """Every line the sidecar recorded on `name`, oldest first (a cut last line skipped)."""
    events: list[dict[str, Any]] = []
    for line in read_on(name, EVENTS).splitlines():
        try:
            event = json.loads(line)
        except ValueError:
            continue
        if isinstance(event, dict):
            events.append(event)
    return events


def cordoned(name: str) -> bool:
    return bool(read_on(name, CORDONED))
