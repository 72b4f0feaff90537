"""The lab's PoRep C1 output, in cuzk's shape: the wrapper curio writes (`SectorNum`,
`Phase1Out`: base64 of a SealCommitPhase1Output's JSON, `SectorSize`) around a phase-1
output whose `replica_id` is derived from the miner and sector as filecoin-proofs derives
it. So the ids a C1 was made for can be checked the way cuzk's self-check finds them out
(a proof for other ids does not verify), and a reader can check them before any proof.

`python -m rollout.lab.c1 SECTOR MINER > c1.json` writes one (playbooks/files/c1.json is
`1 1000`, the lab playbook's `c1_sector_num` and `c1_miner_id`).
"""

from __future__ import annotations

import base64
import hashlib
import json
import sys

REGISTERED_PROOF = "StackedDrg32GiBV1_1"
REGISTERED_PROOF_ID = 8  # its number in filecoin-proofs-api's RegisteredSealProof
SECTOR_SIZE = 32 << 30
FILLER_NODES = 256  # vanilla proofs stand-in: about 18 KB (the real ones are ~50 MB)


def prover_id(miner_id: int) -> bytes:
    """cuzk's make_prover_id: the actor id as an unsigned LEB128, left-aligned in 32 bytes."""
    out = bytearray()
    value = miner_id
    while True:
        byte, value = value & 0x7F, value >> 7
        out.append(byte | (0x80 if value else 0))
        if not value:
            break
    return bytes(out).ljust(32, b"\0")


def porep_id() -> bytes:
    return REGISTERED_PROOF_ID.to_bytes(8, "little") + bytes(24)  # the proof id, nonce 0


def replica_id(miner_id: int, sector_num: int, ticket: bytes, comm_d: bytes) -> bytes:
    """filecoin-proofs' generate_replica_id: sha256 of prover id, sector id (big-endian),
    ticket, comm_d and porep id, its top two bits cleared to fit the field."""
    digest = bytearray(hashlib.sha256(
        prover_id(miner_id) + sector_num.to_bytes(8, "big") + ticket + comm_d + porep_id()
    ).digest())  # fmt: skip
    digest[31] &= 0x3F
    return bytes(digest)


def _bytes32(label: str) -> bytes:
    return hashlib.sha256(f"rollout lab c1 {label}".encode()).digest()


def phase1_output(sector_num: int, miner_id: int) -> dict[str, object]:
    ticket, comm_d = _bytes32("ticket"), _bytes32("comm_d")
    nodes = [hashlib.sha256(str(i).encode()).hexdigest() for i in range(FILLER_NODES)]
    return {
        "registered_proof": REGISTERED_PROOF,
        "vanilla_proofs": {"StackedDrg32GiBV1": [nodes]},
        "comm_r": list(_bytes32("comm_r")),
        "comm_d": list(comm_d),
        "replica_id": list(replica_id(miner_id, sector_num, ticket, comm_d)),
        "seed": list(_bytes32("seed")),
        "ticket": list(ticket),
    }


def c1_json(sector_num: int, miner_id: int) -> bytes:
    """The whole file, as curio writes it for `cuzk-bench single -t porep --c1`."""
    inner = json.dumps(phase1_output(sector_num, miner_id), separators=(",", ":")).encode()
    wrapper = {"SectorNum": sector_num, "Phase1Out": base64.b64encode(inner).decode(),
               "SectorSize": SECTOR_SIZE}  # fmt: skip
    return json.dumps(wrapper, indent=1).encode() + b"\n"


def main(argv: list[str]) -> int:
    if len(argv) != 2 or not all(a.isdigit() for a in argv):
        print("usage: python -m rollout.lab.c1 SECTOR_NUM MINER_ID", file=sys.stderr)
        return 2
    sys.stdout.buffer.write(c1_json(int(argv[0]), int(argv[1])))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
