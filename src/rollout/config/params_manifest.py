"""The proof kinds rollout knows, one table shipped as data (resources/params/kinds.yaml), and
its one loader: for each kind, the files cuzk reads from [srs] param_cache (each with its
CID, its digest, filecoin-proofs' parameters.json: the hex of the first 16 bytes of its
blake2b-512 sum, and its size where one is known), its SRS size and per-partition
reservation in cuzk's memory model, the GPU memory a proof needs (vram), the cuzk-bench
`-t` value that proves it and the registered proofs of its C1s. validate.proof_kind names
one; params (which files), the budget rule (the least budget for one proof), the C1 check
and preflight's GPU check read it here."""

from __future__ import annotations

import functools
import json
import shlex
from dataclasses import dataclass
from importlib import resources
from pathlib import PurePosixPath

from ruamel.yaml import YAML

from rollout.jsontypes import JSONObject

PACKAGE = "rollout.resources"


@dataclass(frozen=True)
class ManifestFile:
    name: str
    cid: str
    digest: str
    sector_size: int
    size: int | None

    def as_setting(self) -> dict[str, str | int | None]:
        """The file as a `params.files` entry."""
        return {"name": self.name, "cid": self.cid, "digest": self.digest, "size": self.size}


def _text(name: str) -> str:
    return resources.files(PACKAGE).joinpath("params").joinpath(name).read_text(encoding="utf-8")


@functools.cache
def _parameters(name: str) -> JSONObject:
    data = json.loads(_text(name))
    if not isinstance(data, dict):
        raise RuntimeError(f"resources/params/{name} is not a JSON object")
    return data


@functools.cache
def _kinds() -> JSONObject:
    data = YAML(typ="safe", pure=True).load(_text("kinds.yaml"))
    if not isinstance(data, dict):
        raise RuntimeError("resources/params/kinds.yaml is not a mapping")
    return data


@dataclass(frozen=True)
class ProofKind:
    """One row of kinds.yaml (its comment says what each field is): every kind there is one
    cuzk can prove, with every figure of cuzk's memory model."""

    name: str
    bench_type: str
    srs: int
    partition: int
    partitions: int
    pce_transient: int
    pce_bytes: int
    registered_proofs: dict[str, int]
    pce_file: str | None = None
    vram: int = 0  # bytes one GPU needs free for a proof of this kind


def kind(name: str) -> ProofKind:
    """The kind `name`, from the shipped table; KeyError for an unknown kind."""
    spec = _kinds()[name]
    return ProofKind(name=name, bench_type=str(spec["bench_type"]),
                     srs=_bytes(name, spec, "srs"), partition=_bytes(name, spec, "partition"),
                     partitions=int(spec.get("partitions", 1)),
                     pce_transient=_bytes(name, spec, "pce_transient"),
                     pce_bytes=_bytes(name, spec, "pce_bytes"),
                     registered_proofs={str(k): int(v) for k, v in
                                        (spec.get("registered_proofs") or {}).items()},
                     pce_file=str(spec["pce_file"]) if spec.get("pce_file") else None,
                     vram=_bytes(name, spec, "vram"))


def _bytes(name: str, spec: JSONObject, key: str) -> int:
    value = spec.get(key)
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise RuntimeError(f"resources/params/kinds.yaml: {name}.{key} is not a size in bytes")
    return value


def all_registered_proofs() -> dict[str, int]:
    """Every registered proof of every kind, with its number."""
    out: dict[str, int] = {}
    for name in kinds():
        out |= kind(name).registered_proofs
    return out


# cuzk-bench's own names for each proof type, as it reads `-t`/`--type` (case-insensitive):
# curio extern/cuzk/cuzk-bench/src/main.rs, proof_kind_from_str.
BENCH_TYPE_NAMES = {
    "porep": "porep", "porep-c2": "porep", "seal-commit": "porep",
    "snap": "snap", "snap-deals": "snap", "update": "snap",
    "wpost": "wpost", "window-post": "wpost", "windowpost": "wpost",
    "winning": "winning", "winning-post": "winning", "winningpost": "winning",
}


def bench_type_asked(command: str | list[str]) -> str | None:
    """The proof type a `cuzk-bench ... single` command asks for (`-t X`, `-tX`, `-t=X`,
    `--type X`, `--type=X`), as cuzk-bench's own name for it (`porep-c2` is `porep`); an
    unknown name is returned as written. None: not such a command, or one that names no
    type. A command line that is no valid shell is left to the loader's own check of it."""
    try:
        words = shlex.split(command) if isinstance(command, str) else list(command)
    except ValueError:
        return None
    starts = [i for i, w in enumerate(words) if PurePosixPath(w).name == "cuzk-bench"]
    if not starts or "single" not in words[starts[0]:]:
        return None
    written = _type_option(words[starts[0]:])
    if written is None:
        return None
    return BENCH_TYPE_NAMES.get(written.lower(), written)


def _type_option(args: list[str]) -> str | None:
    for i, word in enumerate(args):
        if word in ("-t", "--type") and i + 1 < len(args):
            return args[i + 1]
        if word.startswith("--type="):
            return word.removeprefix("--type=")
        if word.startswith("-t") and not word.startswith("--") and len(word) > 2:
            return word[2:].removeprefix("=")
    return None


def kinds() -> list[str]:
    """The proof kinds the shipped manifest knows, in its order."""
    return list(_kinds())


def files_for(kind: str) -> list[ManifestFile]:
    """The files `kind` reads, from the shipped manifest; KeyError for an unknown kind."""
    spec = _kinds()[kind]
    table = _parameters(spec["parameters"])
    return [_entry(name, table[name]) for name in spec["files"]]


def _entry(name: str, entry: JSONObject) -> ManifestFile:
    size = entry.get("size")
    return ManifestFile(name=name, cid=str(entry["cid"]), digest=str(entry["digest"]),
                        sector_size=int(entry["sector_size"]),
                        size=int(size) if size is not None else None)
