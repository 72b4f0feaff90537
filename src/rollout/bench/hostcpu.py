"""The lab hosts' own CPU, from each host container's cgroup: what a deployment costs the
hosts (everything in the container: sshd, the agent, the guard, the daemon), read before and
after each side of the side-by-side bench.

cgroup v2 (or the unified hierarchy beside v1): `cpu.stat`'s usage_usec; cgroup v1 alone:
`cpuacct.usage` (nanoseconds). The container's cgroup is read from /proc/PID/cgroup of its
first process, so Docker's cgroupfs and systemd drivers both work."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from rollout import lab
from rollout.errors import EnvironmentProblem

PROC = Path("/proc")


@dataclass(frozen=True)
class CpuFile:
    """A cgroup's CPU counter: the file and the seconds one unit of it is."""

    path: Path
    v2: bool  # cpu.stat (usage_usec) rather than cpuacct.usage (ns)

    def seconds(self) -> float:
        text = self.path.read_text()
        return usage_usec(text) / 1e6 if self.v2 else int(text.strip()) / 1e9


def usage_usec(cpu_stat: str) -> int:
    """usage_usec from a cgroup v2 cpu.stat."""
    for line in cpu_stat.splitlines():
        key, _, value = line.partition(" ")
        if key == "usage_usec":
            return int(value)
    raise ValueError("cpu.stat has no usage_usec")


def cgroup_paths(proc_cgroup: str) -> tuple[str | None, str | None]:
    """(the v2 path, the v1 cpuacct path) from a /proc/PID/cgroup text; None where absent."""
    v2 = v1 = None
    for line in proc_cgroup.splitlines():
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        _, controllers, path = parts
        if parts[0] == "0" and controllers == "":
            v2 = path
        elif "cpuacct" in controllers.split(","):
            v1 = path
    return v2, v1


def mount_points(mounts: str) -> tuple[Path | None, Path | None]:
    """(the cgroup2 mount, the v1 cpuacct mount) from a /proc/self/mounts text."""
    v2 = v1 = None
    for line in mounts.splitlines():
        fields = line.split()
        if len(fields) < 4:
            continue
        where, fstype, options = fields[1], fields[2], fields[3].split(",")
        if fstype == "cgroup2" and v2 is None:
            v2 = Path(where)
        elif fstype == "cgroup" and "cpuacct" in options and v1 is None:
            v1 = Path(where)
    return v2, v1


def cpu_file(proc_cgroup: str, mounts: str) -> CpuFile | None:
    """The CPU counter of the cgroup a /proc/PID/cgroup names, where this machine mounts it."""
    (v2_path, v1_path), (v2_mount, v1_mount) = cgroup_paths(proc_cgroup), mount_points(mounts)
    if v2_path is not None and v2_mount is not None:
        stat = v2_mount / v2_path.lstrip("/") / "cpu.stat"
        if stat.is_file():
            return CpuFile(stat, v2=True)
    if v1_path is not None and v1_mount is not None:
        usage = v1_mount / v1_path.lstrip("/") / "cpuacct.usage"
        if usage.is_file():
            return CpuFile(usage, v2=False)
    return None


@dataclass(frozen=True)
class HostCpu:
    """The CPU counters of a set of host containers; `seconds()` is their sum."""

    files: tuple[CpuFile, ...]

    @property
    def hosts(self) -> int:
        return len(self.files)

    def seconds(self) -> float:
        return sum(f.seconds() for f in self.files)


def host_cpu(pids: Sequence[int], proc: Path = PROC) -> HostCpu:
    """The counters of the containers whose first processes are `pids`; EnvironmentProblem
    (exit 3) when one cannot be found (no cgroup accounting readable here)."""
    mounts = (proc / "self" / "mounts").read_text()
    found = [cpu_file((proc / str(pid) / "cgroup").read_text(), mounts) for pid in pids]
    if any(f is None for f in found):
        raise EnvironmentProblem("the lab hosts' cgroup CPU counters are not readable here "
                                 "(neither cpu.stat nor cpuacct.usage under /sys/fs/cgroup)")
    return HostCpu(tuple(f for f in found if f is not None))


def container_pids(containers: Iterable[str]) -> list[int]:
    """The first process of each named lab container (Docker's State.Pid)."""
    client = lab.ensure_engine()
    return [int(client.containers.get(name).attrs["State"]["Pid"]) for name in containers]


def lab_host_cpu() -> HostCpu:
    """The counters of this lab's host containers."""
    return host_cpu(container_pids(h["container"] for h in lab.status()))
