"""A PoRep C1 output (the validation proof's input), read as cuzk reads it, and the sector
and miner ids it was made for.

cuzk (curio extern/cuzk, cuzk-core/src/prover.rs, C1OutputWrapper) reads the JSON curio
writes: `{"SectorNum": 1, "Phase1Out": "<base64 of the SealCommitPhase1Output JSON>",
"SectorSize": 34359738368}`. It proves with the sector number and miner id of the REQUEST
(cuzk-bench's `--sector-num`, default 1, and `--miner-id`, default 1000), not the file's:
a C1 made for another sector or miner fails its proof, after the old daemon was stopped.

SectorNum says the sector. The miner is only in the C1's replica id, which filecoin-proofs
derives (storage-proofs-porep, generate_replica_id) as sha256(prover_id || sector_id as 8
big-endian bytes || ticket || comm_d || porep_id) with the top two bits of its last byte
cleared; prover_id is the miner id as LEB128, left-aligned in 32 bytes (cuzk's
make_prover_id); porep_id is the registered proof's number as 8 little-endian bytes, then
zeros (filecoin-proofs-api, RegisteredSealProof::porep_id, nonce 0). Which registered
proofs a kind's C1s are, with their numbers, is the kinds table's (validate.proof_kind;
rollout.config.params_manifest); a C1 of another registered proof has its miner id left
unchecked, or is refused where validate.proof_kind names a kind it is not of.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
import shlex
from dataclasses import dataclass
from pathlib import PurePosixPath
from typing import TypeGuard

from rollout.config.params_manifest import ProofKind, all_registered_proofs
from rollout.jsontypes import JSON

DEFAULT_SECTOR, DEFAULT_MINER = 1, 1000  # cuzk-bench single's defaults
MAX_C1_BYTES = 512 * 1024**2  # a 32 GiB PoRep C1 is about 51 MB; more is not a C1

@dataclass(frozen=True)
class C1Ids:
    """What a C1 says about the sector and miner it was made for."""

    sector: int | None  # SectorNum; None: the file names none
    replica: tuple[str, bytes, bytes, bytes] | None  # (registered proof, ticket, comm_d,
    # replica_id): what the miner check needs; None: not a C1 whose replica id rollout reads
    why: str = ""  # why the ids could not be read, where they could not

    @property
    def proof(self) -> str | None:
        """The C1's registered proof (its kind in filecoin-proofs' names), where read."""
        return None if self.replica is None else self.replica[0]

    def replica_matches(self, sector: int, miner: int,
                        porep_ids: dict[str, int] | None = None) -> bool | None:
        """Whether the C1's replica id is the one of this sector and miner; None: unknown
        (no replica id read, or a registered proof not in `porep_ids`, by default every
        kind's)."""
        if self.replica is None:
            return None
        proof, ticket, comm_d, replica_id = self.replica
        number = (all_registered_proofs() if porep_ids is None else porep_ids).get(proof)
        if number is None:
            return None
        return replica_id_of(miner, sector, ticket, comm_d, number) == replica_id


def prover_id(miner: int) -> bytes:
    """The miner id as LEB128, left-aligned in 32 bytes (cuzk's make_prover_id)."""
    out = bytearray()
    while True:
        byte, miner = miner & 0x7F, miner >> 7
        out.append(byte | (0x80 if miner else 0))
        if not miner:
            return bytes(out).ljust(32, b"\0")


def replica_id_of(miner: int, sector: int, ticket: bytes, comm_d: bytes, proof: int) -> bytes:
    porep_id = proof.to_bytes(8, "little").ljust(32, b"\0")
    digest = bytearray(hashlib.sha256(
        prover_id(miner) + sector.to_bytes(8, "big") + ticket + comm_d + porep_id).digest())
    digest[31] &= 0b0011_1111
    return bytes(digest)


def read_ids(data: bytes) -> C1Ids:
    """The ids a C1's bytes say; fields that are missing or not what curio writes leave
    them unknown (with why), never a guess."""
    try:
        doc = json.loads(data)
    except (ValueError, UnicodeDecodeError) as e:
        return C1Ids(None, None, f"not JSON ({str(e)[:80]})")
    if not isinstance(doc, dict):
        return C1Ids(None, None, "not a JSON object")
    sector = doc.get("SectorNum")
    if not _is_u64(sector):
        return C1Ids(None, None, "no SectorNum (not a C1 as curio writes it)")
    return C1Ids(sector, *_replica(doc.get("Phase1Out")))


def _replica(phase1: JSON) -> tuple[tuple[str, bytes, bytes, bytes] | None, str]:
    if not isinstance(phase1, str):
        return None, "no Phase1Out"
    try:
        inner = json.loads(base64.b64decode(phase1, validate=True))
    except (ValueError, binascii.Error, UnicodeDecodeError):
        return None, "Phase1Out is not base64 of JSON"
    if not isinstance(inner, dict):
        return None, "Phase1Out is not a JSON object"
    proof = inner.get("registered_proof")
    fields = [_bytes32(inner.get(k)) for k in ("ticket", "comm_d", "replica_id")]
    if not isinstance(proof, str) or not proof.isidentifier() or len(proof) > 64:
        return None, f"registered proof {str(proof)[:40]!r} is not a RegisteredSealProof name"
    ticket, comm_d, replica_id = fields
    if ticket is None or comm_d is None or replica_id is None:
        return None, "ticket, comm_d or replica_id is not 32 bytes"
    return (proof, ticket, comm_d, replica_id), ""


def _is_u64(value: JSON) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool) and 0 <= value < 2**64


def _bytes32(value: JSON) -> bytes | None:
    if isinstance(value, list) and len(value) == 32 and all(
            isinstance(b, int) and not isinstance(b, bool) and 0 <= b < 256 for b in value):
        return bytes(value)
    return None


@dataclass(frozen=True)
class Asked:
    """The sector and miner a validation command asks cuzk-bench to prove; None: not a
    `cuzk-bench ... single` command (a script of the user's: nothing to compare)."""

    sector: int
    miner: int


def asked_ids(command: str) -> Asked | None:
    """From a rendered validation command line: cuzk-bench's --sector-num and --miner-id
    (`--flag N` or `--flag=N`), its defaults where absent."""
    try:
        words = shlex.split(command)
    except ValueError:
        return None
    starts = [i for i, w in enumerate(words) if PurePosixPath(w).name == "cuzk-bench"]
    if not starts or "single" not in words[starts[0]:]:
        return None
    values = _flags(words[starts[0]:], ("--sector-num", "--miner-id"))
    try:
        return Asked(int(values.get("--sector-num", DEFAULT_SECTOR)),
                     int(values.get("--miner-id", DEFAULT_MINER)))
    except ValueError:
        return None  # not a number: cuzk-bench refuses it itself, before any proof


def _flags(words: list[str], names: tuple[str, ...]) -> dict[str, str]:
    out = {}
    for i, word in enumerate(words):
        name, eq, value = word.partition("=")
        if name in names:
            if eq:
                out[name] = value
            elif i + 1 < len(words):
                out[name] = words[i + 1]
    return out


MINER_SWITCH = "preflight.c1_miner"


def mismatch(ids: C1Ids, asked: Asked, kind: ProofKind | None = None,
             check_miner: bool = True) -> str | None:
    """Why the proof would fail for these ids, or None when nothing says it would. `kind`:
    validate.proof_kind's row (None: no kind set, any kind's C1); check_miner false: the
    replica id is not compared (preflight.c1_miner)."""
    if ids.sector is not None and ids.sector != asked.sector:
        return (f"it is the C1 of sector {ids.sector}, but the validation command asks for "
                f"sector {asked.sector} (--sector-num)")
    if kind is not None and ids.proof is not None and ids.proof not in kind.registered_proofs:
        known = ", ".join(kind.registered_proofs) or "none: its input is no C1"
        return (f"it is a {ids.proof} C1, but validate.proof_kind is {kind.name} "
                f"(its C1s: {known})")
    porep_ids = None if kind is None else kind.registered_proofs
    if check_miner and ids.replica_matches(asked.sector, asked.miner, porep_ids) is False:
        return (f"its replica id is not that of miner {asked.miner} and sector "
                f"{asked.sector} (--miner-id, --sector-num): it was made for another miner "
                f"(rollout's reading of filecoin-proofs' replica id; {MINER_SWITCH}: false "
                "turns this comparison off)")
    return None
