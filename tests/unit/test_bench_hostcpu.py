"""The lab hosts' CPU from their cgroups: /proc/PID/cgroup and the mounts read, on a fake
/proc and a fake cgroup tree in a temporary folder (v2, unified beside v1, and v1 alone)."""

from __future__ import annotations

from pathlib import Path

import pytest

from rollout.bench.hostcpu import cgroup_paths, cpu_file, host_cpu, mount_points, usage_usec
from rollout.errors import EnvironmentProblem

HYBRID = "2:cpuacct:/docker/abc\n1:cpu:/docker/abc\n0::/docker/abc\n"
V1_ONLY = "3:cpu,cpuacct:/docker/abc\n1:name=systemd:/docker/abc\n"


def _mounts(root: Path, v2: bool = True, v1: bool = True) -> str:
    lines = ["proc /proc proc rw 0 0"]
    if v2:
        lines.append(f"cgroup2 {root}/unified cgroup2 rw,relatime 0 0")
    if v1:
        lines.append(f"cgroup {root}/cpu,cpuacct cgroup rw,relatime,cpu,cpuacct 0 0")
    return "\n".join(lines) + "\n"


def _tree(root: Path, usec: int = 2_500_000, ns: int = 1_500_000_000) -> None:
    (root / "unified/docker/abc").mkdir(parents=True)
    (root / "unified/docker/abc/cpu.stat").write_text(
        f"usage_usec {usec}\nuser_usec 1\nsystem_usec 2\n")
    (root / "cpu,cpuacct/docker/abc").mkdir(parents=True)
    (root / "cpu,cpuacct/docker/abc/cpuacct.usage").write_text(f"{ns}\n")


def test_parsers_read_the_v2_and_v1_lines() -> None:
    assert cgroup_paths(HYBRID) == ("/docker/abc", "/docker/abc")
    assert cgroup_paths(V1_ONLY) == (None, "/docker/abc")
    assert cgroup_paths("garbage\n\n") == (None, None)
    assert usage_usec("user_usec 3\nusage_usec 42\n") == 42
    with pytest.raises(ValueError):
        usage_usec("user_usec 3\n")
    assert mount_points(_mounts(Path("/c"))) == (Path("/c/unified"), Path("/c/cpu,cpuacct"))


def test_v2_counter_is_preferred_and_v1_used_where_there_is_no_v2(tmp_path: Path) -> None:
    _tree(tmp_path)
    v2 = cpu_file(HYBRID, _mounts(tmp_path))
    assert v2 is not None and v2.v2 and v2.seconds() == pytest.approx(2.5)
    v1 = cpu_file(V1_ONLY, _mounts(tmp_path, v2=False))
    assert v1 is not None and not v1.v2 and v1.seconds() == pytest.approx(1.5)
    assert cpu_file("0::/docker/other\n", _mounts(tmp_path)) is None  # no such cgroup


def test_host_cpu_sums_the_hosts_and_counts_what_they_spend(tmp_path: Path) -> None:
    proc, cg = tmp_path / "proc", tmp_path / "cg"
    _tree(cg)
    (proc / "self").mkdir(parents=True)
    (proc / "self/mounts").write_text(_mounts(cg))
    for pid in (10, 11):
        (proc / str(pid)).mkdir()
        (proc / str(pid) / "cgroup").write_text(HYBRID)
    cpu = host_cpu([10, 11], proc)
    assert cpu.hosts == 2 and cpu.seconds() == pytest.approx(5.0)
    (cg / "unified/docker/abc/cpu.stat").write_text("usage_usec 3000000\n")
    assert cpu.seconds() == pytest.approx(6.0)  # read again each time
    (proc / "12").mkdir()
    (proc / "12/cgroup").write_text("0::/docker/gone\n")
    with pytest.raises(EnvironmentProblem, match="cgroup CPU"):
        host_cpu([10, 12], proc)
