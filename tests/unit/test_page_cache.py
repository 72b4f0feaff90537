"""Checks that read a release leave no page cache behind: read twice (facts, then the switch),
a release's pages turn active and count in the working set the drain waits on."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from rollout.host.scripts import ops
from rollout.host.scripts.actions import facts


def test_facts_digest_drops_the_file_from_the_page_cache(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    exe = tmp_path / "cuzk-daemon"
    exe.write_bytes(b"\x7fELF" + os.urandom(3 << 20))
    advised: list[tuple[int, int, int]] = []
    monkeypatch.setattr(os, "posix_fadvise", lambda fd, off, n, how: advised.append((off, n, how)))
    assert facts.sha256_of(str(exe)) is not None
    assert advised == [(0, 0, os.POSIX_FADV_DONTNEED)]


def test_the_release_check_evicts_what_it_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    names = ["cuzk-daemon", "cuzk-bench"]
    for name in names:
        (tmp_path / name).write_bytes(name.encode())
    advised: list[tuple[int, int, int]] = []
    monkeypatch.setattr(os, "posix_fadvise", lambda fd, off, n, how: advised.append((off, n, how)))
    sums = ops.file_sums(str(tmp_path), names)["sums"]
    assert set(sums) == set(names) and all(len(v) == 64 for v in sums.values())
    assert advised == [(0, 0, os.POSIX_FADV_DONTNEED)] * 2


MIB = 1 << 20


def test_status_shows_the_figure_the_drain_uses_beside_raw_usage(tmp_path: Path) -> None:
    """Issue 17: 600 MiB of page cache the old daemon left on the active list, mapped by no
    one. The facts (which `status` shows) and the drain count the same working set, 100 MiB,
    and status shows the raw 700 MiB beside it."""
    from rollout.commands import status
    from rollout.host.facts import HostFacts
    from rollout.host.scripts import common

    cg = tmp_path / "cgroup"
    cg.mkdir()
    (cg / "cgroup.controllers").write_text("memory\n")
    (cg / "memory.current").write_text(f"{700 * MIB}\n")
    (cg / "memory.max").write_text(f"{1 << 30}\n")
    (cg / "memory.stat").write_text(
        f"anon {90 * MIB}\nfile {600 * MIB}\nshmem 0\nfile_mapped 0\nfile_dirty 0\n"
        f"file_writeback 0\nactive_file {590 * MIB}\ninactive_file {10 * MIB}\n")
    memory = HostFacts.parse({"cgroup": facts.cgroup(str(cg))}).memory
    drained = common.working_memory(str(cg), str(tmp_path / "noproc"))
    assert memory.working_set == drained["working_set"] == 100 * MIB
    assert memory.page_cache == drained["page_cache"] == 600 * MIB
    row = {"memory_used": memory.usage, "memory_limit": memory.limit,
           "memory_working_set": memory.working_set}
    assert status._memory_text(row) == "100.0MiB (raw 700.0MiB) / 1.0GiB"
    assert status._memory_text({**row, "memory_working_set": None}) == "700.0MiB / 1.0GiB"
