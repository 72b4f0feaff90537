"""Preflight checks on what a host reports: CPU flags, GPUs, ldd output, the budget."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from contexts import settings_for, small_host

from rollout.host.facts import HostFacts
from rollout.host.reports import GpuReport
from rollout.steps.kinds import preflight
from rollout.steps.preflight_inputs import Look

LDD_MISSING = """\tlinux-vdso.so.1 (0x00007ffd)
\tlibcuda.so.1 => not found
\tlibstdc++.so.6 => /lib/x86_64-linux-gnu/libstdc++.so.6 (0x00007f)
/data/releases/abc/cuzk-daemon: /lib/x86_64-linux-gnu/libc.so.6: version `GLIBC_2.38' not found (required by /data/releases/abc/cuzk-daemon)
"""  # noqa: E501


def test_ldd_not_found_lines_name_libraries_and_symbol_versions() -> None:
    assert preflight.missing_libraries(LDD_MISSING) == [
        "libcuda.so.1 => not found",
        "/data/releases/abc/cuzk-daemon: /lib/x86_64-linux-gnu/libc.so.6: version "
        "`GLIBC_2.38' not found (required by /data/releases/abc/cuzk-daemon)",
    ]
    assert preflight.missing_libraries("\tnot a dynamic executable\n") == []


def test_cpu_flags_from_x86_and_arm_cpuinfo() -> None:
    assert "adx" in preflight.cpu_flags("flags\t\t: fpu vme adx bmi2\n")
    assert preflight.cpu_flags("Features\t: fp asimd aes\n") == {"fp", "asimd", "aes"}
    assert preflight.cpu_flags("") == set()


def test_gpu_indexes_from_nvidia_smi_csv() -> None:
    text = "".join(f"{i}, GPU-{i}, NVIDIA GeForce RTX 4090, 550.54.15, 8.9, 24564, 24000\n"
                   for i in (0, 1))
    gpus, odd = GpuReport.parse({"exit": 0, "output": text}).listed()
    assert [g.ordinal for g in gpus] == [0, 1] and odd == []


def ctx_with(total_budget: str = "cgroup", min_budget: str = "0") -> Any:
    """A context whose settings are the lab playbook's (a kind with no cuzk figure), with
    these budget settings."""
    base = settings_for(small_host())
    settings = base.model_copy(update={
        "daemon": base.daemon.model_copy(update={"total_budget": total_budget,
                                                 "safety_margin": "64MiB"}),
        "preflight": base.preflight.model_copy(update={"min_budget": min_budget})})
    return SimpleNamespace(settings=settings)


FACTS = HostFacts.parse({"cgroup": {"memory": {"limit": 512 * 2**20}}})


def test_budget_below_the_proof_minimum_is_refused_naming_both_numbers() -> None:
    notes: list[str] = []
    problems = preflight.check_budget(Look(ctx_with(min_budget="1GiB"), FACTS), notes)
    assert problems == [
        "memory budget 448.0MiB (469762048 bytes) is below the minimum 1.0GiB "
        "(1073741824 bytes) the proof needs (preflight.min_budget)"
    ]
    assert preflight.check_budget(Look(ctx_with(min_budget="448MiB"), FACTS), notes) == []
    assert notes == ["budget 448.0MiB fits"]


def test_fixed_budget_over_the_limit_is_refused() -> None:
    problems = preflight.check_budget(Look(ctx_with(total_budget="1GiB"), FACTS), [])
    assert problems and "exceeds the cgroup limit minus the safety margin" in problems[0]


def test_no_visible_cgroup_limit_is_refused_naming_the_setting_never_memtotal() -> None:
    """Issue 17: no visible limit is an explicit total_budget or a refusal, never MemTotal."""
    facts = HostFacts.parse({"cgroup": {"memory": {"limit": None, "source": "cgroup-v2"}},
                             "meminfo": {"total": 512 * 2**30, "available": 500 * 2**30}})
    notes: list[str] = []
    problems = preflight.check_budget(Look(ctx_with(), facts), notes)
    assert len(problems) == 1 and "set daemon.total_budget" in problems[0], problems
    assert "cgroup-v2: none set" in problems[0] and notes == []
    assert preflight.check_budget(Look(ctx_with(total_budget="400GiB"), facts), notes) == []
    assert notes == ["budget 400.0GiB as set (daemon.total_budget; the host shows no cgroup "
                     "memory limit to hold it against)"]
