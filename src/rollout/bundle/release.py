"""A release: the executables extracted from one image, named by their combined digest.

A plain value below the steps: the steps put it on hosts, a bundle stores it, the engine
and the commands pass it around. Nothing here reads a host or the network.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from dataclasses import dataclass

from rollout.jsontypes import JSONObject


@dataclass(frozen=True)
class Release:
    """A set of executables extracted from one image, named by their combined digest.

    `source`: the URL of a published bundle the hosts download the executables from
    themselves (rollout.bundle); None: the controller pushes them. `build_args`: the
    arguments it was built with (CUDA_BASE and CUDA_ARCHS: what GPUs and driver it needs).
    """

    id: str
    image: str
    version: str
    artifacts: tuple[Artifact, ...]
    source: str | None = None
    build_args: tuple[tuple[str, str], ...] = ()

    def to_dict(self) -> JSONObject:
        return {
            "id": self.id,
            "image": self.image,
            "version": self.version,
            "artifacts": {a.name: {"sha256": a.sha256, "size": a.size} for a in self.artifacts},
        }


@dataclass(frozen=True)
class Artifact:
    name: str
    local_path: str
    sha256: str
    size: int


def release_id_of(artifacts: Iterable[Artifact]) -> str:
    """A release's id: the combined digest of its executables' names and sha256s."""
    joined = "".join(f"{a.name}={a.sha256};" for a in artifacts)
    return hashlib.sha256(joined.encode()).hexdigest()[:12]
