"""The proof parameters shipped as data (resources/params): filecoin-proofs' real entries,
the files each proof kind needs, and the lab's own files, which must match their bytes."""

from __future__ import annotations

import base64
import hashlib
from pathlib import Path

import pytest

from rollout.config.params_manifest import bench_type_asked, files_for, kind, kinds
from rollout.config.playbook import DEFAULT_PLAYBOOK, LAB_PLAYBOOK, parse_set_options
from rollout.config.playbook_model import Playbook
from rollout.config.sections import ParamsSpec, parse_size
from rollout.errors import ConfigError
from rollout.steps.kinds import load_playbook

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


def playbook(*sets: str, path: Path = LAB_PLAYBOOK) -> Playbook:
    return load_playbook(path, overrides=parse_set_options(sets), builds=False)


def test_the_validations_kind_gives_the_params_files_unless_they_are_listed() -> None:
    """validate.proof_kind is the one setting: params.files null takes its files."""
    assert [f.cid for f in playbook("proof_kind=porep-32g").params.files] == [
        f.cid for f in files_for("porep-32g")]
    assert [f.cid for f in playbook().params.files] == [f.cid for f in files_for("lab-porep")]
    assert playbook("params_files=[]").params.files == []
    listed = playbook('params_files=[{"name": "x.vk"}]').params.files
    assert [f.name for f in listed] == ["x.vk"]
    none = playbook("proof_kind=")
    assert none.validation.proof_kind is None and none.params.files == []


def test_the_pce_room_follows_the_proof_kind_unless_set() -> None:
    """A playbook that leaves params.pce_bytes out (or null) still gets the room check of
    its proof kind's PCE: cuzk writes 25.7 GiB for porep-32g in every daemon's lifetime."""
    real = playbook("proof_kind=porep-32g", path=DEFAULT_PLAYBOOK).params
    assert (real.pce_file, parse_size(real.pce_bytes)) == ("pce-porep-32g.bin", 26 << 30)
    lab = playbook().params
    assert (lab.pce_file, parse_size(lab.pce_bytes)) == ("pce-porep-32g.bin", 26 << 20)
    assert (kind("wpost-32g").pce_file, kind("wpost-32g").pce_bytes) == (
        "pce-window-post.bin", 26 << 30)  # every kind has its figure (issue 27)
    assert (kind("snap-32g").pce_file, kind("snap-32g").pce_bytes) == (
        "pce-snap-deals-32g.bin", 17 << 30)
    assert parse_size(playbook("pce_bytes=1GiB").params.pce_bytes) == 1 << 30
    assert parse_size(playbook("pce_bytes=0").params.pce_bytes) == 0  # explicitly off
    none = playbook("proof_kind=").params
    assert (none.pce_file, parse_size(none.pce_bytes)) == ("pce-porep-32g.bin", 0)


@pytest.mark.parametrize("value", ["porep-128g", "porep-64g", "$(reboot)", "none"])
def test_an_unknown_kind_is_refused_naming_the_key_and_the_known_ones(value: str) -> None:
    with pytest.raises(ConfigError) as e:
        playbook(f"proof_kind={value}")
    assert "validate.proof_kind: unknown proof kind" in str(e.value)
    assert "known: porep-32g, wpost-32g" in str(e.value) and e.value.exit_code == 2


@pytest.mark.parametrize("path", [LAB_PLAYBOOK, DEFAULT_PLAYBOOK])
def test_a_command_that_proves_another_kind_is_refused_at_load(path: Path) -> None:
    """The validation command's cuzk-bench -t must be the kind's: file:line: key."""
    with pytest.raises(ConfigError) as e:
        playbook("proof_kind=wpost-32g", path=path)
    message = str(e.value)
    assert f"{path.name}:" in message and ": validate.command: " in message
    assert "cuzk-bench -t porep, but validate.proof_kind is wpost-32g (-t wpost)" in message
    for name in ("porep-32g", "lab-porep"):
        assert playbook(f"proof_kind={name}", path=path).validation.proof_kind == name


@pytest.mark.parametrize(("command", "asked"), [
    ("/r/cuzk-bench -a http://h:1 single -t porep --c1 /c1.json", "porep"),
    (["/r/cuzk-bench", "single", "-twpost"], "wpost"),
    ("cuzk-bench single -t=snap", "snap"),
    ("cuzk-bench single -t porep-c2", "porep"),  # cuzk-bench's other names for a type
    ("cuzk-bench single --type Window-PoST", "wpost"),
    ("cuzk-bench single --type=winningpost", "winning"),
    ("cuzk-bench single -t update", "snap"),
    ("cuzk-bench single -t sealing", "sealing"),  # unknown: as written, the check names it
    ("cuzk-bench single --c1 /c1.json", None),  # names no -t
    ("cuzk-bench status -t porep", None),  # not single
    ("my-check -t porep", None),  # not cuzk-bench: the user's own script
    ("cuzk-bench single -t 'unbalanced", None),  # no shell: the loader's own check names it
])
def test_the_bench_type_the_command_asks_for(command: str | list[str], asked: str | None) -> None:
    assert bench_type_asked(command) == asked


@pytest.mark.parametrize("name", kinds())
def test_every_kind_has_one_row_the_three_users_read(name: str) -> None:
    """One table: the -t value, the budget figures (an SRS figure never without a
    partition's; the lab's kind has a partition alone), the C1s' porep ids."""
    row = kind(name)
    assert row.bench_type in ("porep", "wpost", "winning", "snap")
    assert (row.srs is None or row.partition is not None) and row.partitions == 1
    assert (row.srs is None) == (row.partition is None) or name == "lab-porep"
    assert bool(row.registered_proofs) == (row.bench_type == "porep")
    assert kind("porep-32g").registered_proofs == {"StackedDrg32GiBV1": 3, "StackedDrg32GiBV1_1": 8}
    assert (kind("porep-32g").srs or 0) + (kind("porep-32g").partition or 0) == (44 + 14) << 30
