"""Local transport: runs on this machine. For the controller's own work and for tests."""

from __future__ import annotations

import os
import shutil
import subprocess

from rollout.transport.base import RunResult, Transport


def resume_offset(local_path: str, remote_path: str, resume: bool) -> int:
    if not resume or not os.path.exists(remote_path):
        return 0
    have = os.path.getsize(remote_path)
    return have if have <= os.path.getsize(local_path) else 0


class LocalTransport(Transport):
    def __init__(self, name: str = "localhost") -> None:
        self.name = name

    def run(
        self, command: str, timeout: float | None = None, stdin: str | None = None
    ) -> RunResult:
        try:
            p = subprocess.run(
                ["bash", "-c", command],
                input=stdin or "",
                capture_output=True,
                text=True,
                timeout=timeout,
            )
        except subprocess.TimeoutExpired as e:
            out = e.stdout.decode() if isinstance(e.stdout, bytes) else (e.stdout or "")
            return RunResult(command, 124, out, "(timed out)")
        return RunResult(command, p.returncode, p.stdout, p.stderr)

    def put(self, local_path: str, remote_path: str, resume: bool = False) -> None:
        start = resume_offset(local_path, remote_path, resume)
        with open(local_path, "rb") as src, open(remote_path, "ab" if start else "wb") as dst:
            src.seek(start)
            shutil.copyfileobj(src, dst, 1 << 20)

    def get(self, remote_path: str, local_path: str) -> None:
        shutil.copyfile(remote_path, local_path)
