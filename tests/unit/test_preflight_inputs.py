"""Preflight's C1 and PCE checks, run against this machine (a local host agent, real folders):
a C1 made for another sector or miner is refused before anything is stopped; param_cache
must hold a full rewrite of the PCE file (cuzk writes it anew in every lifetime, through
`<pce>.tmp`), and a leftover `.tmp` is removed through safe_remove, never through a link."""

from __future__ import annotations

import base64
import json
import os
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from contexts import AgentTransport, small_host

from rollout.config.params_manifest import all_registered_proofs
from rollout.config.playbook import LAB_PLAYBOOK, parse_set_options
from rollout.errors import StepFailed
from rollout.host.layout import Layout
from rollout.steps import c1
from rollout.steps.base import HostContext
from rollout.steps.kinds import load_playbook
from rollout.steps.kinds.preflight import CHECKS, reads_ahead
from rollout.steps.preflight_inputs import (
    Look,
    check_c1_ids,
    check_pce_space,
    leftover_pce_tmp,
    pce_room,
    pce_tmp_name,
)

GIB = 1024**3
TICKET, COMM_D = bytes(range(32)), bytes(range(100, 132))


def make_c1(sector: int = 1, miner: int = 1000, proof: str = "StackedDrg32GiBV1_1") -> bytes:
    """A C1 shaped as curio writes it (cuzk's C1OutputWrapper around the base64 JSON of a
    SealCommitPhase1Output), made for `sector` and `miner`."""
    number = all_registered_proofs().get(proof, 8)  # another proof: made as a 32 GiB one
    replica = c1.replica_id_of(miner, sector, TICKET, COMM_D, number)
    inner = {"registered_proof": proof, "vanilla_proofs": {"StackedDrg32GiBV1": [[]]},
             "comm_r": list(range(32)), "comm_d": list(COMM_D), "replica_id": list(replica),
             "seed": list(range(32)), "ticket": list(TICKET)}
    return json.dumps({"SectorNum": sector, "SectorSize": 34359738368,
                       "Phase1Out": base64.b64encode(json.dumps(inner).encode()).decode()}
                      ).encode()


# ---- the PCE


@pytest.mark.parametrize(("name", "tmp"), [
    ("pce-porep-32g.bin", "pce-porep-32g.tmp"),  # cuzk-pce save_to_disk: with_extension
    ("pce", "pce.tmp"), (".pce", ".pce.tmp"), ("a.b.bin", "a.b.tmp"),
])
def test_the_temporary_is_named_as_rust_names_it(name: str, tmp: str) -> None:
    assert pce_tmp_name(name) == tmp


@pytest.mark.parametrize("name", ["../../etc/passwd", "a/b", "..", ""])
def test_a_pce_name_that_is_a_path_is_refused(name: str) -> None:
    with pytest.raises(StepFailed):
        pce_tmp_name(name)
    with pytest.raises(ValueError):
        load_playbook(LAB_PLAYBOOK, overrides=parse_set_options(("pce_bytes=0",)),
                      ).params.model_validate({"pce_file": name})


def test_an_existing_pce_file_is_counted_again_not_as_zero() -> None:
    existing = {"size": 26 * GIB, "blocks": 26 * GIB}
    need, have, short = pce_room(16 * GIB, existing, None, free=20 * GIB)
    assert (need, have) == (26 * GIB, 20 * GIB)
    assert short is not None and "needs 26.0GiB" in short and "existing PCE file" in short
    assert pce_room(16 * GIB, existing, None, free=27 * GIB)[2] is None
    assert pce_room(28 * GIB, existing, None, free=27 * GIB)[0] == 28 * GIB  # the larger


def test_a_leftover_temporary_counts_as_free_by_its_blocks() -> None:
    existing = {"size": 26 * GIB, "blocks": 26 * GIB}
    tmp = {"size": 26 * GIB, "blocks": 10 * GIB}  # a write cut short: 10 GiB on disk
    need, have, short = pce_room(0, existing, tmp, free=20 * GIB)
    assert (need, have, short) == (26 * GIB, 30 * GIB, None)
    assert pce_room(0, existing, {"size": 26 * GIB, "blocks": 0}, free=20 * GIB)[2]


def pce_context(tmp_path: Path, pce_bytes: str = "1MiB", cache: Path | None = None
                ) -> HostContext:
    settings = SimpleNamespace(
        params=SimpleNamespace(pce_bytes=pce_bytes, pce_file="pce-porep-32g.bin"),
        daemon=SimpleNamespace(param_cache=str(cache or tmp_path / "params")))
    return HostContext(SimpleNamespace(name="h", vars={}), AgentTransport("h"),
                       Layout(str(tmp_path / "root")), settings=settings)


def sparse(path: Path, size: int) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "wb") as f:
        f.truncate(size)
    return path


def test_preflight_refuses_a_host_without_room_for_the_rewrite(tmp_path: Path) -> None:
    ctx = pce_context(tmp_path)
    notes: list[str] = []
    assert check_pce_space(Look.running(ctx), notes) == []  # no PCE yet: 1 MiB fits
    assert "room for the PCE rewrite: 1.0MiB" in notes[0]
    free = os.statvfs(tmp_path).f_bavail * os.statvfs(tmp_path).f_frsize
    sparse(tmp_path / "params" / "pce-porep-32g.bin", free + 1024**4)  # larger than the disk
    problems = check_pce_space(Look.running(ctx), [])
    assert len(problems) == 1 and "rewrites the PCE file" in problems[0]
    assert "existing PCE file" in problems[0]


def test_a_link_in_place_of_the_pce_is_not_measured_through(tmp_path: Path) -> None:
    free = os.statvfs(tmp_path).f_bavail * os.statvfs(tmp_path).f_frsize
    huge = sparse(tmp_path / "elsewhere" / "big", free + 1024**4)
    (tmp_path / "params").mkdir()
    (tmp_path / "params" / "pce-porep-32g.bin").symlink_to(huge)
    assert check_pce_space(Look.running(pce_context(tmp_path)), []) == []


def test_pce_bytes_zero_turns_the_check_off(tmp_path: Path) -> None:
    notes: list[str] = []
    assert check_pce_space(Look.running(pce_context(tmp_path, "0")), notes) == []
    assert "no PCE space check" in notes[0]


def test_a_leftover_temporary_is_removed(tmp_path: Path) -> None:
    ctx = pce_context(tmp_path)
    assert leftover_pce_tmp(ctx) is None  # no param_cache yet: nothing to remove
    tmp = sparse(tmp_path / "params" / "pce-porep-32g.tmp", GIB)
    assert leftover_pce_tmp(ctx) == f"removed a leftover {tmp}"
    assert not tmp.exists()
    assert leftover_pce_tmp(ctx) is None


def test_a_link_in_place_of_the_temporary_is_removed_not_its_target(tmp_path: Path) -> None:
    target = tmp_path / "precious"
    target.write_text("keep me\n")
    (tmp_path / "params").mkdir()
    (tmp_path / "params" / "pce-porep-32g.tmp").symlink_to(target)
    assert leftover_pce_tmp(pce_context(tmp_path)) is not None
    assert target.read_text() == "keep me\n"
    assert not os.path.lexists(tmp_path / "params" / "pce-porep-32g.tmp")


def test_nothing_is_removed_through_a_param_cache_that_is_a_link(tmp_path: Path) -> None:
    real = tmp_path / "etc"
    sparse(real / "pce-porep-32g.tmp", 10)
    (tmp_path / "params").symlink_to(real)  # params on another disk: the host goes on
    note = leftover_pce_tmp(pce_context(tmp_path))
    assert note is not None and note.startswith("left ") and "symbolic link" in note
    assert (real / "pce-porep-32g.tmp").exists()


def test_the_checks_run_in_preflight_c1_before_staging_pce_after() -> None:
    names = list(CHECKS)
    assert names.index("c1") < names.index("params") < names.index("pce")


# ---- the C1


def test_the_c1s_ids_are_read_as_cuzk_reads_them() -> None:
    ids = c1.read_ids(make_c1(sector=7, miner=1234))
    assert ids.sector == 7
    assert ids.replica_matches(7, 1234) is True
    assert ids.replica_matches(7, 1000) is False
    assert ids.replica_matches(8, 1234) is False


@pytest.mark.parametrize(("data", "why"), [
    (b"not json", "not JSON"),
    (b"[1, 2]", "not a JSON object"),
    (json.dumps({"note": "lab stand-in"}).encode(), "no SectorNum"),
    (json.dumps({"SectorNum": -1}).encode(), "no SectorNum"),
    (json.dumps({"SectorNum": True}).encode(), "no SectorNum"),
    (json.dumps({"SectorNum": 3, "Phase1Out": "@@"}).encode(), "not base64"),
])
def test_a_c1_that_is_not_curios_leaves_the_ids_unknown(data: bytes, why: str) -> None:
    ids = c1.read_ids(data)
    assert why in ids.why
    assert ids.replica_matches(1, 1000) is None


def test_a_registered_proof_no_kind_has_leaves_the_miner_unchecked() -> None:
    ids = c1.read_ids(make_c1(proof="StackedDrg32GiBV1_2_Feat_NonInteractivePoRep"))
    assert ids.sector == 1 and ids.proof == "StackedDrg32GiBV1_2_Feat_NonInteractivePoRep"
    assert ids.replica_matches(1, 1000) is None
    assert c1.mismatch(ids, c1.Asked(1, 1000)) is None  # no kind set: nothing says it fails


@pytest.mark.parametrize("proof", ["$(reboot)", "A" * 65, 7, None])
def test_a_hostile_registered_proof_is_not_read(proof: Any) -> None:
    data = json.loads(make_c1())
    inner = json.loads(base64.b64decode(data["Phase1Out"]))
    inner["registered_proof"] = proof
    data["Phase1Out"] = base64.b64encode(json.dumps(inner).encode()).decode()
    ids = c1.read_ids(json.dumps(data).encode())
    assert ids.sector == 1 and ids.replica is None and "RegisteredSealProof" in ids.why


@pytest.mark.parametrize(("command", "asked"), [
    ("/data/releases/r/cuzk-bench -a http://127.0.0.1:9820 single -t porep --c1 /d/c1.json "
     "--sector-num 7 --miner-id 1234", c1.Asked(7, 1234)),
    ("cuzk-bench single -t porep --c1 /d/c1.json", c1.Asked(1, 1000)),  # cuzk-bench's defaults
    ("cuzk-bench single --sector-num=9 --miner-id=77", c1.Asked(9, 77)),
    ("'/data/with space/cuzk-bench' single --sector-num '5'", c1.Asked(5, 1000)),
    ("/usr/local/bin/my-check --sector-num 3", None),  # not cuzk-bench: nothing to compare
    ("cuzk-bench status", None),
    ("cuzk-bench single --sector-num '$(reboot)'", None),  # not a number: cuzk-bench refuses
    ("cuzk-bench single 'unbalanced", None),
])
def test_the_ids_the_command_asks_for(command: str, asked: c1.Asked | None) -> None:
    assert c1.asked_ids(command) == asked


def c1_context(tmp_path: Path, sector: int, miner: int, source: Path | None,
               *more: str, settings: dict[str, Any] | None = None) -> HostContext:
    sets = ("params_files=[]", "pce_bytes=0", f"c1_sector_num={sector}", f"c1_miner_id={miner}",
            *more)
    playbook = load_playbook(LAB_PLAYBOOK, overrides=parse_set_options(sets), settings=settings)
    validation = playbook.validation
    path = str(tmp_path / "host-c1.json")
    spec = validation.model_copy(update={"input": validation.input.model_copy(
        update={"source": source, "path": path})})
    host = small_host()
    settings = playbook.for_host(host).model_copy(update={"validation": spec})
    return HostContext(host, AgentTransport(host.name), Layout(str(tmp_path / "root")),
                       settings)


@pytest.mark.parametrize("on", ["controller", "host"])
def test_a_c1_for_the_asked_sector_and_miner_passes(tmp_path: Path, on: str) -> None:
    source = tmp_path / "c1.json"
    source.write_bytes(make_c1(sector=5, miner=4321))
    (tmp_path / "host-c1.json").write_bytes(source.read_bytes())
    notes: list[str] = []
    ctx = c1_context(tmp_path, 5, 4321, source if on == "controller" else None)
    assert check_c1_ids(Look.running(ctx), notes) == []
    assert notes == ["C1 made for miner 4321, sector 5"]


@pytest.mark.parametrize("on", ["controller", "host"])
@pytest.mark.parametrize(("sector", "miner", "said"), [
    (6, 4321, "it is the C1 of sector 5, but the validation command asks for sector 6"),
    (5, 1000, "its replica id is not that of miner 1000 and sector 5"),
])
def test_a_wrong_sector_or_miner_is_refused(
    tmp_path: Path, on: str, sector: int, miner: int, said: str
) -> None:
    source = tmp_path / "c1.json"
    source.write_bytes(make_c1(sector=5, miner=4321))
    (tmp_path / "host-c1.json").write_bytes(source.read_bytes())
    ctx = c1_context(tmp_path, sector, miner, source if on == "controller" else None)
    problems = check_c1_ids(Look.running(ctx), [])
    assert len(problems) == 1 and said in problems[0], problems
    assert "the proof would fail after the stop" in problems[0]


def test_the_lab_c1_is_checked_as_a_real_one(tmp_path: Path) -> None:
    source = LAB_PLAYBOOK.parent / "files" / "c1.json"  # made for miner 1000, sector 1
    notes: list[str] = []
    assert check_c1_ids(Look.running(c1_context(tmp_path, 1, 1000, source)), notes) == []
    assert notes == ["C1 made for miner 1000, sector 1"]
    assert "replica id" in check_c1_ids(Look.running(c1_context(tmp_path, 1, 1001, source)), [])[0]


def test_the_miner_comparison_alone_can_be_turned_off(tmp_path: Path) -> None:
    """preflight.c1_miner false: a C1 of another miner passes, noted; the sector is still
    compared. The refusal names the switch."""
    source = tmp_path / "c1.json"
    source.write_bytes(make_c1(sector=5, miner=4321))
    refused = check_c1_ids(Look.running(c1_context(tmp_path, 5, 1000, source)), [])
    assert "preflight.c1_miner: false turns this comparison off" in refused[0]
    off = {"preflight.c1_miner": False}
    notes: list[str] = []
    ctx = c1_context(tmp_path, 5, 1000, source, settings=off)
    assert check_c1_ids(Look.running(ctx), notes) == []
    assert notes == ["C1 is sector 5; miner not compared (preflight.c1_miner false)"]
    ctx = c1_context(tmp_path, 6, 1000, source, settings=off)
    wrong_sector = check_c1_ids(Look.running(ctx), [])
    assert "sector 5, but the validation command asks for sector 6" in wrong_sector[0]


def test_a_c1_of_another_kind_than_the_validations_is_refused(tmp_path: Path) -> None:
    """validate.proof_kind says which C1s the validation proves: a 64 GiB PoRep C1 under the
    lab's lab-porep (32 GiB) is refused, naming both."""
    source = tmp_path / "c1.json"
    source.write_bytes(make_c1(proof="StackedDrg64GiBV1_1"))
    problems = check_c1_ids(Look.running(c1_context(tmp_path, 1, 1000, source)), [])
    assert len(problems) == 1
    assert "it is a StackedDrg64GiBV1_1 C1, but validate.proof_kind is lab-porep" in problems[0]
    assert "StackedDrg32GiBV1, StackedDrg32GiBV1_1" in problems[0]
    notes: list[str] = []  # no kind set: cuzk proves no 64 GiB kind, none has its porep id
    ctx = c1_context(tmp_path, 1, 1000, source, "proof_kind=")
    assert check_c1_ids(Look.running(ctx), notes) == []
    assert notes == ["C1 is sector 1; miner not checked (registered proof StackedDrg64GiBV1_1 "
                     "has no porep id in the kinds table)"]


def test_a_c1_that_names_no_sector_is_noted_not_refused(tmp_path: Path) -> None:
    source = tmp_path / "c1.json"
    source.write_text(json.dumps({"note": "a stand-in's input"}))
    notes: list[str] = []
    assert check_c1_ids(Look.running(c1_context(tmp_path, 1, 1000, source)), notes) == []
    assert notes[0].startswith("C1 ids not checked (no SectorNum")


def test_a_c1_on_the_host_that_is_a_link_or_huge_is_not_read(tmp_path: Path) -> None:
    (tmp_path / "host-c1.json").symlink_to("/dev/zero")
    notes: list[str] = []
    assert check_c1_ids(Look.running(c1_context(tmp_path, 1, 1000, None)), notes) == []
    assert "not readable on the host" in notes[0]


def test_the_controller_reads_the_c1_once_for_all_hosts(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    source = tmp_path / "c1.json"
    source.write_bytes(make_c1())
    reads: list[bytes] = []
    real = c1.read_ids

    def counted(data: bytes) -> Any:
        reads.append(data)
        return real(data)

    monkeypatch.setattr(c1, "read_ids", counted)
    for _ in range(3):
        assert check_c1_ids(Look.running(c1_context(tmp_path, 1, 1000, source)), []) == []
    assert len(reads) == 1


# ---- the reads of preflight's checks, ahead in one round trip


class Counted(AgentTransport):
    """The local agent, counting the host calls that reach it."""

    calls: list[str]

    def call(self, source: str, call: str, kwargs: Any, timeout: float | None = None) -> Any:
        self.calls.append(call)
        return super().call(source, call, kwargs, timeout)


def test_the_c1_and_pce_reads_go_ahead_in_one_round_trip(tmp_path: Path) -> None:
    (tmp_path / "host-c1.json").write_bytes(make_c1(sector=5, miner=4321))
    ctx = c1_context(tmp_path, 5, 4321, None)
    ctx.settings = ctx.settings.model_copy(update={"params": ctx.settings.params.model_copy(
        update={"pce_bytes": "1MiB", "pce_file": "pce-porep-32g.bin"})})
    transport = Counted("h")
    transport.calls = []
    ctx.transport = transport
    alone: list[str] = []
    look = Look.running(ctx)
    assert check_c1_ids(look, alone) == [] and check_pce_space(look, alone) == []
    assert transport.calls == ["ops.c1_probe", "ops.pce_sizes"]
    transport.calls.clear()
    ctx.prefetch(reads_ahead(ctx, ("c1", "pce", "executables")))
    ahead: list[str] = []
    assert check_c1_ids(look, ahead) == [] and check_pce_space(look, ahead) == []
    assert transport.calls == ["ops.batch"] and ahead == alone  # same notes, one round trip
    assert check_c1_ids(look, []) == [] and transport.calls[-1] == "ops.c1_probe"  # once
    ctx.prefetch(reads_ahead(ctx, ("c1", "pce")))
    ctx.forget_reads()  # a change on the host since: read again
    check_pce_space(Look.running(ctx), [])
    assert transport.calls[-1] == "ops.pce_sizes"


@pytest.mark.parametrize(("data", "why"), [
    (b"{not json", "not JSON"), (b"[1, 2]", "no SectorNum"), (b'{"SectorNum": 3}', None)])
def test_a_c1_on_the_host_is_read_as_hostile_data(tmp_path: Path, data: bytes,
                                                  why: str | None) -> None:
    from rollout.host.scripts import ops

    path = tmp_path / "c1.json"
    path.write_bytes(data)
    out = ops.c1_probe(str(path), 1024)
    if why == "not JSON":
        assert out["outcome"] == "odd" and out["odd"] == "not JSON"
    else:
        assert out["outcome"] == "read" and isinstance(out["c1"], dict)
    assert ops.c1_probe(str(path), 2)["outcome"] == "odd"  # larger than the limit
    assert ops.c1_probe(str(tmp_path / "none"), 1024)["outcome"] == "missing"


def test_a_batch_answers_each_call_in_order_and_none_for_what_is_not_one(
    tmp_path: Path
) -> None:
    from rollout.host.scripts import ops

    (tmp_path / "f").write_text("x")
    out = ops.batch([{"call": "file_present", "kwargs": {"path": str(tmp_path / "f")}},
                     {"call": "batch", "kwargs": {"calls": []}}, "hostile", {"call": 3},
                     {"call": "file_present", "kwargs": {"path": str(tmp_path / "g")}},
                     {"call": "file_present", "kwargs": {"nope": 1}}])
    reports = out["reports"]
    assert [r and r["outcome"] for r in reports] == [
        "present", None, None, None, "missing", "bad-call"]
    assert ops.batch("not a list")["reports"] == []  # type: ignore[arg-type]
