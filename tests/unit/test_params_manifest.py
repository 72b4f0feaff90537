"""The proof parameters shipped as data (resources/params): filecoin-proofs' real entries,
the files each proof kind needs, and the lab's own files, which must match their bytes."""

from __future__ import annotations

import base64
import hashlib
from pathlib import Path

import pytest
from pydantic import ValidationError

from rollout.config.params_manifest import files_for, kinds
from rollout.config.sections import ParamsSpec

REPO = Path(__file__).resolve().parents[2]
POREP = "v28-stacked-proof-of-replication-merkletree-poseidon_hasher-8-8-0-sha256_hasher-82a357d2f2ca81dc61bb45f4a762807aedee1b0a53fd6c4e77b46a01bfef7820"  # noqa: E501
WINNING = "v28-proof-of-spacetime-fallback-merkletree-poseidon_hasher-8-8-0-559e581f022bb4e4ec6e719e563bf0e026ad6de42e56c18714a2c692b1b88d7e"  # noqa: E501
WINDOW = "v28-proof-of-spacetime-fallback-merkletree-poseidon_hasher-8-8-0-0377ded656c6f524f1618760bffe4e0a1c51d5a70c4509eedae8a27555733edc"  # noqa: E501


def test_porep_32g_is_filecoin_proofs_entry() -> None:
    params, vk = files_for("porep-32g")
    assert (params.name, params.cid, params.digest) == (
        f"{POREP}.params", "QmengpM684XLQfG8754ToonszgEg2bQeAGUan5uXTHUQzJ",
        "6a388072a518cf46ebd661f5cc46900a")
    assert (vk.name, vk.cid, vk.digest) == (
        f"{POREP}.vk", "Qmf93EMrADXAK6CyiSfE8xx45fkMfR3uzKEPCvZC1n2kzb",
        "0c7b4aac1c40fdb7eb82bc355b41addf")
    assert params.sector_size == 32 << 30 and params.size is None  # no source gives it


def test_the_posts_are_cuzks_circuits_for_32g() -> None:
    assert [f.name for f in files_for("wpost-32g")] == [f"{WINDOW}.params", f"{WINDOW}.vk"]
    assert [f.name for f in files_for("winning-32g")] == [f"{WINNING}.params", f"{WINNING}.vk"]
    assert files_for("winning-32g")[0].digest == "d84f79a16fe40e9e25a36e2107bb1ba0"


@pytest.mark.parametrize("kind", kinds())
def test_every_kind_has_a_params_file_and_its_vk_with_cid_and_digest(kind: str) -> None:
    files = files_for(kind)
    assert {Path(f.name).suffix for f in files} == {".params", ".vk"}
    for f in files:
        assert len(f.digest) == 32 and int(f.digest, 16) >= 0
        assert f.cid.startswith(("Qm", "bafk"))
        ParamsSpec.model_validate({"files": [f.as_setting()]})  # each entry is a valid setting


def test_the_lab_kind_describes_the_lab_files_bytes() -> None:
    for f in files_for("lab-porep"):
        data = (REPO / "playbooks" / "files" / "params" / f.name).read_bytes()
        assert f.size == len(data)
        assert f.digest == hashlib.blake2b(data).hexdigest()[:32]  # blake2b-512, 16 bytes
        raw = bytes([0x01, 0x55, 0x12, 0x20]) + hashlib.sha256(data).digest()
        assert f.cid == "b" + base64.b32encode(raw).decode().lower().rstrip("=")


def test_a_kind_gives_its_files_unless_they_are_listed() -> None:
    assert [f.cid for f in ParamsSpec(kind="porep-32g").files] == [
        f.cid for f in files_for("porep-32g")]
    assert ParamsSpec(kind="porep-32g", files=[]).files == []
    listed = ParamsSpec.model_validate({"kind": "porep-32g", "files": [{"name": "x.vk"}]})
    assert [f.name for f in listed.files] == ["x.vk"]
    assert ParamsSpec(kind="").kind is None


def test_an_unknown_kind_is_refused_naming_the_known_ones() -> None:
    with pytest.raises(ValidationError, match="unknown proof kind 'porep-128g'; known: porep-32g"):
        ParamsSpec(kind="porep-128g")


@pytest.mark.parametrize("field,value", [
    ("digest", "6A388072A518CF46EBD661F5CC46900A"), ("digest", "6a38; rm -rf /"),
    ("cid", "Qm$(reboot)"), ("cid", "../../etc/passwd"), ("name", "../x.params"),
])
def test_hostile_manifest_values_are_refused(field: str, value: str) -> None:
    entry = {"name": "x.params", field: value}
    with pytest.raises(ValidationError):
        ParamsSpec.model_validate({"files": [entry]})


def test_the_gateway_is_a_base_url_and_the_default_curios() -> None:
    assert ParamsSpec().gateway == "https://proofs.filecoin.io"
    assert ParamsSpec(gateway="http://127.0.0.1:8080/").gateway == "http://127.0.0.1:8080"
    for bad in ("file:///etc", "http://h/x?y=1", "http://h/$(id) x", "ftp://h"):
        with pytest.raises(ValidationError):
            ParamsSpec(gateway=bad)
