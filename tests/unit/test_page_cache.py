"""Checks that read a release leave no page cache behind: read twice (facts, then the switch),
a release's pages turn active and count in the working set the drain waits on."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path
from typing import Any

import pytest

from rollout.host.scripts import facts
from rollout.steps import install
from rollout.transport.base import RunResult


def test_facts_digest_drops_the_file_from_the_page_cache(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    exe = tmp_path / "cuzk-daemon"
    exe.write_bytes(b"\x7fELF" + os.urandom(3 << 20))
    advised: list[tuple[int, int, int]] = []
    monkeypatch.setattr(os, "posix_fadvise", lambda fd, off, n, how: advised.append((off, n, how)))
    assert facts.sha256_of(str(exe)) is not None
    assert advised == [(0, 0, os.POSIX_FADV_DONTNEED)]


class Shell:
    """A host's shell: the steps' commands run here, in bash."""

    def __init__(self) -> None:
        self.sent: list[str] = []

    def sh(self, command: str, **_: Any) -> RunResult:
        self.sent.append(command)
        p = subprocess.run(["bash", "-c", command], capture_output=True, text=True, check=False)
        return RunResult(command, p.returncode, p.stdout, p.stderr)


def test_the_release_check_evicts_what_it_read(tmp_path: Path) -> None:
    names = ["cuzk-daemon", "cuzk-bench"]
    for name in names:
        (tmp_path / name).write_bytes(name.encode())
    shell = Shell()
    sums = install._sha256s(shell, str(tmp_path), names)  # type: ignore[arg-type]
    assert set(sums) == set(names) and all(len(v) == 64 for v in sums.values())
    assert "iflag=nocache" in shell.sent[0] and "sha256sum" in shell.sent[0]
