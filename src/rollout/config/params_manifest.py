"""The proof parameters rollout ships as data (resources/params): for each proof kind, the
files cuzk reads from [srs] param_cache, each with its CID, its digest (filecoin-proofs'
parameters.json: the hex of the first 16 bytes of its blake2b-512 sum) and its size where
one is known. kinds.yaml says which file each kind needs and where its entry is."""

from __future__ import annotations

import functools
import json
from dataclasses import dataclass
from importlib import resources
from typing import Any

from ruamel.yaml import YAML

PACKAGE = "rollout.resources"


@dataclass(frozen=True)
class ManifestFile:
    name: str
    cid: str
    digest: str
    sector_size: int
    size: int | None

    def as_setting(self) -> dict[str, Any]:
        """The file as a `params.files` entry."""
        return {"name": self.name, "cid": self.cid, "digest": self.digest, "size": self.size}


def _text(name: str) -> str:
    return resources.files(PACKAGE).joinpath("params").joinpath(name).read_text(encoding="utf-8")


@functools.cache
def _parameters(name: str) -> dict[str, Any]:
    data = json.loads(_text(name))
    if not isinstance(data, dict):
        raise RuntimeError(f"resources/params/{name} is not a JSON object")
    return data


@functools.cache
def _kinds() -> dict[str, Any]:
    data = YAML(typ="safe", pure=True).load(_text("kinds.yaml"))
    if not isinstance(data, dict):
        raise RuntimeError("resources/params/kinds.yaml is not a mapping")
    return data


def kinds() -> list[str]:
    """The proof kinds the shipped manifest knows, in its order."""
    return list(_kinds())


def files_for(kind: str) -> list[ManifestFile]:
    """The files `kind` reads, from the shipped manifest; KeyError for an unknown kind."""
    spec = _kinds()[kind]
    table = _parameters(spec["parameters"])
    return [_entry(name, table[name]) for name in spec["files"]]


def _entry(name: str, entry: dict[str, Any]) -> ManifestFile:
    size = entry.get("size")
    return ManifestFile(name=name, cid=str(entry["cid"]), digest=str(entry["digest"]),
                        sector_size=int(entry["sector_size"]),
                        size=int(size) if size is not None else None)
