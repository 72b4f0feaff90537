"""Preflight's GPU check (issue 27): nvidia-smi's answer read as hostile data, the driver
and architecture rule (NVIDIA's published figures, config/cuda.py) and the lab's stand-in
nvidia-smi, which must answer as harshly as the real one. The decisions themselves are
cases: tests/unit/cases/preflight/gpus-*.yaml."""

from __future__ import annotations

import contextlib
import importlib.util
import io
import json
import os
import stat
from importlib.machinery import SourceFileLoader
from pathlib import Path
from types import ModuleType, SimpleNamespace
from typing import Any

import pytest

from rollout.bundle.manifest import manifest_for, parse_manifest
from rollout.bundle.release import Artifact, Release, release_id_of
from rollout.config import cuda
from rollout.host.reports import MOST_GPUS, Gpu, GpuReport
from rollout.host.scripts.actions import reads
from rollout.lab.image import dockerfiles_dir
from rollout.steps.kinds.preflight import CudaBuild

LINE = "0, GPU-a, NVIDIA GeForce RTX 4090, 550.54.15, 8.9, 24564, 20000"
STANDIN = dockerfiles_dir() / "lab-standin" / "nvidia-smi"


def report(output: str, apps: str = "", exit: Any = 0) -> GpuReport:
    return GpuReport.parse({"outcome": "ran", "exit": exit, "output": output,
                            "apps_exit": 0, "apps": apps})


# ---------------------------------------------------------------- the answer, as hostile data


def test_a_gpu_line_reads_into_checked_figures() -> None:
    (gpu,), odd = report(LINE + "\n").listed()
    assert odd == []
    assert gpu == Gpu(0, "GPU-a", "NVIDIA GeForce RTX 4090", (550, 54, 15), 89,
                      24564 * 1024**2, 20000 * 1024**2, {})


@pytest.mark.parametrize(
    ("line", "said"),
    [
        (LINE + ", 1", "a line of 8 fields, not 7"),
        ("0, GPU-a, x", "a line of 3 fields, not 7"),
        ("-1" + LINE[1:], "a GPU index that is not one: '-1'"),
        ("9999" + LINE[1:], "a GPU index that is not one: '9999'"),
        ("\x1b[31m" + LINE, "a GPU index that is not one: '?[31m0'"),
    ],
)
def test_a_line_that_is_not_a_gpu_is_named_never_read(line: str, said: str) -> None:
    gpus, odd = report(line + "\n" + LINE + "\n").listed()
    assert len(gpus) == 1 and len(odd) == 1 and said in odd[0], odd


@pytest.mark.parametrize(
    ("field", "text"),
    [
        ("driver_version", "[N/A]"), ("driver_version", "550.54.15.1.2"),
        ("driver_version", "99999.1"), ("compute_cap", "[N/A]"), ("compute_cap", "8"),
        ("compute_cap", "123.4"), ("memory.total", "1e9"), ("memory.free", "-5"),
        ("memory.free", "9" * 40), ("memory.free", "[N/A]"),
    ],
)
def test_a_field_nvidia_smi_cannot_give_is_none_and_said(field: str, text: str) -> None:
    cells = dict(zip(reads.GPU_FIELDS, LINE.split(", "), strict=True)) | {field: text}
    (gpu,), odd = report(", ".join(cells.values())).listed()
    assert odd == [] and gpu.odd == {field: text[:20]}
    read = {"driver_version": gpu.driver, "compute_cap": gpu.compute_cap,
            "memory.total": gpu.total, "memory.free": gpu.free}
    assert read[field] is None


def test_a_huge_answer_is_cut_and_refused_not_half_read() -> None:
    gpus, odd = report("".join(f"{i}{LINE[1:]}\n" for i in range(500))).listed()
    assert len(gpus) <= MOST_GPUS and odd and "more than 64" in odd[0]
    assert report("x" * 10**6).output == "x" * 8192  # the host sends 8 KiB; kept as much


@pytest.mark.parametrize("doc", [None, [], "0, H100", {"exit": "0", "output": ["0, H100"]},
                                 {"exit": 0, "output": 5, "apps": {"a": 1}}])
def test_a_report_of_the_wrong_shape_lists_nothing_never_crashes(doc: Any) -> None:
    r = GpuReport.parse(doc)
    assert r.listed() == ((), []) and r.held({1}) == {}


def test_the_memory_held_counts_only_the_pids_asked_for() -> None:
    apps = ("GPU-a, 10, 1000\nGPU-a, 11, 500\nGPU-b, 10, [N/A]\nGPU-b, x, 7\n"
            "GPU-a, 10\nGPU-c, 10, 99999999999\n")
    assert report(LINE, apps).held({10}) == {"GPU-a": 1000 * 1024**2}
    assert report(LINE, apps).held({10, 11}) == {"GPU-a": 1500 * 1024**2}
    failed = GpuReport.parse({"exit": 0, "output": LINE, "apps_exit": 6, "apps": apps})
    assert failed.held({10}) == {}


# ---------------------------------------------------------------- the rule (NVIDIA's figures)


@pytest.mark.parametrize(
    ("build", "cc", "needed"),
    [
        ((12, 8), 120, (570, 26)),  # Blackwell: R570, whatever the CUDA 12 floor
        ((12, 8), 100, (570, 26)),
        ((12, 8), 89, (525, 60, 13)),  # minor version compatibility: any 12.x on 525.60.13
        ((12, 6), 89, (525, 60, 13)),
        ((12, 0), None, (525, 60, 13)),
        ((11, 8), 86, (450, 80, 2)),
        ((13, 0), 90, (580,)),
        ((13, 0), 120, (580,)),  # CUDA 13's floor is above Blackwell's
        ((14, 0), 90, None),  # a CUDA release rollout knows no floor for: not judged
    ],
)
def test_the_driver_a_build_needs(build: tuple[int, int], cc: int | None,
                                  needed: tuple[int, ...] | None) -> None:
    assert cuda.driver_needed(build, cc) == needed


def runs(driver: tuple[int, ...], build: tuple[int, int], cc: int) -> bool:
    needed = cuda.driver_needed(build, cc)
    assert needed is not None
    return driver >= needed


def test_the_driver_floors_are_not_stricter_than_nvidia() -> None:
    """A 12.6 build on 550 and a 12.8 build for Ada on 535 run (minor version
    compatibility); a 12.8 build on an RTX 5090 needs R570."""
    assert runs((550, 54, 15), (12, 6), 89) and runs((535, 104, 5), (12, 8), 89)
    assert not runs((565, 57, 1), (12, 8), 120) and runs((570, 86, 16), (12, 8), 120)
    assert cuda.driver_text((570, 124, 6)) == "570.124.06"
    assert cuda.driver_text((580,)) == "580"


@pytest.mark.parametrize(
    ("archs", "cc", "runs"),
    [
        ([89], 89, True), ([86], 89, True), ([80], 86, True),  # X.Y code runs on X.Z, Z >= Y
        ([89], 86, False), ([89], 120, False), ([90], 100, False), ([100], 120, False),
        ([120], 120, True), ([86, 89, 120], 120, True), ([75], 80, False),
    ],
)
def test_a_gpu_runs_the_code_of_its_own_major_version(archs: list[int], cc: int,
                                                       runs: bool) -> None:
    assert cuda.runs_on(archs, cc) is runs


def test_every_family_is_one_rollout_can_name() -> None:
    assert [getattr(cuda.family_of(cc), "arch", None) for cc in (121, 89, 86, 50)] == [
        120, 89, 86, None]


# ---------------------------------------------------------------- the lab's stand-in


def standin(tmp_path: Path, gpus: Any | None) -> ModuleType:
    loader = SourceFileLoader("lab_nvidia_smi", str(STANDIN))
    spec = importlib.util.spec_from_loader(loader.name, loader)
    assert spec is not None
    module = importlib.util.module_from_spec(spec)
    loader.exec_module(module)
    module.GPUS = str(tmp_path / "gpus")  # type: ignore[attr-defined]
    if gpus is not None:
        (tmp_path / "gpus").write_text(json.dumps(gpus))
    return module


def ask(module: ModuleType, *args: str) -> tuple[int, str]:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        try:
            code = module.main(list(args))
        except SystemExit as e:
            code = e.code
    return int(code), out.getvalue()


def query(fields: tuple[str, ...]) -> tuple[str, str]:
    return f"--query-gpu={','.join(fields)}", "--format=csv,noheader,nounits"


def test_the_standin_answers_what_preflight_reads(tmp_path: Path) -> None:
    module = standin(tmp_path, {"gpus": [
        {"name": "NVIDIA GeForce RTX 5090", "driver": "550.54.15", "compute_cap": "12.0",
         "total": 32607, "free": 30000, "uuid": "GPU-x"},
        {"name": "NVIDIA GeForce RTX 4090", "driver": "550.54.15", "compute_cap": "8.9",
         "total": 24564, "free": "[N/A]"}], "apps": [["GPU-x", 77, 1000]]})
    code, out = ask(module, *query(reads.GPU_FIELDS))
    assert code == 0
    r = report(out, ask(module, f"--query-compute-apps={','.join(reads.APP_FIELDS)}",
                        "--format=csv,noheader,nounits")[1])
    gpus, odd = r.listed()
    assert odd == [] and [g.compute_cap for g in gpus] == [120, 89]
    assert gpus[1].odd == {"memory.free": "[N/A]"} and r.held({77}) == {"GPU-x": 1000 << 20}


@pytest.mark.parametrize(
    ("gpus", "code", "said"),
    [
        (None, 9, "couldn't communicate with the NVIDIA driver"),  # no driver loaded
        ([], 6, "No devices were found"),
        ({"gpus": [{"name": "x"}], "old": True}, 2, 'Field "compute_cap" is not a valid'),
    ],
)
def test_the_standin_is_no_kinder_than_nvidia_smi(tmp_path: Path, gpus: Any, code: int,
                                                  said: str) -> None:
    got, out = ask(standin(tmp_path, gpus), *query(reads.GPU_FIELDS))
    assert got == code and said in out


def test_the_host_action_says_a_failed_nvidia_smi_as_data(tmp_path: Path,
                                                          monkeypatch: pytest.MonkeyPatch
                                                          ) -> None:
    """On a host without a driver (the stand-in without its file) the action reports the
    exit and the message; preflight names them."""
    fake = tmp_path / "bin" / "nvidia-smi"
    fake.parent.mkdir()
    fake.write_text(f"#!/bin/sh\nexec python3 {STANDIN} \"$@\"\n")
    fake.chmod(fake.stat().st_mode | stat.S_IXUSR)
    monkeypatch.setenv("PATH", f"{fake.parent}{os.pathsep}{os.environ['PATH']}")
    out = reads.gpus(timeout=30)
    assert out["outcome"] == "failed" and out["exit"] == 9 and out["apps"] == ""
    assert "couldn't communicate with the NVIDIA driver" in out["output"]


def test_the_host_action_keeps_nvidia_smis_warnings_apart_from_its_answer(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A warning on stderr of an nvidia-smi that answered is no GPU line: it comes back
    apart (`warnings`) and preflight says it, never refuses for it."""
    fake = tmp_path / "bin" / "nvidia-smi"
    fake.parent.mkdir()
    fake.write_text(f"#!/bin/sh\necho 'WARNING: infoROM is corrupted at gpu 0000:04:00.0' >&2"
                    f"\necho '{LINE}'\n")
    fake.chmod(fake.stat().st_mode | stat.S_IXUSR)
    monkeypatch.setenv("PATH", f"{fake.parent}{os.pathsep}{os.environ['PATH']}")
    out = reads.gpus(timeout=30)
    assert out["outcome"] == "ran" and out["output"] == LINE + "\n"
    assert "infoROM is corrupted" in out["warnings"]
    r = GpuReport.parse(out)
    assert len(r.listed()[0]) == 1 and r.listed()[1] == []
    assert r.said() == ["WARNING: infoROM is corrupted at gpu 0000:04:00.0"]


def test_a_malformed_line_of_a_gpu_the_daemon_does_not_use_refuses_nothing() -> None:
    r = report(LINE + "\n1, GPU-b, x\n")
    assert r.listed([0])[1] == [] and len(r.listed()[1]) == 1
    assert len(r.listed([1])[1]) == 1


def test_a_bundles_release_carries_the_cuda_build_its_manifest_records() -> None:
    """`--release DIR|URL`: the release's CUDA build is its manifest's, not the playbook's."""
    artifact = Artifact("cuzk-daemon", "", "1" * 64, 10)
    release = Release(release_id_of([artifact]), "img", "v1", (artifact,))
    args = {"CUDA_BASE": "nvidia/cuda:12.8.1-devel-ubuntu22.04", "CUDA_ARCHS": "89 120"}
    text = manifest_for(release, None, args, None, "2026-01-01T00:00:00Z").to_json()
    loaded = parse_manifest(text, "manifest.json").release_for()
    target = SimpleNamespace(release=loaded, pending=False)
    build = CudaBuild.of(target)  # type: ignore[arg-type]
    assert (build.version, build.archs) == ((12, 8), [89, 120])
