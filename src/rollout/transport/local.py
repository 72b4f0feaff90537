"""Local transport: runs on this machine. For the controller's own work and for tests."""

from __future__ import annotations

import os
import select
import shutil
import subprocess
import time

from rollout.transport.base import (
    LocalFile,
    Progress,
    RunResult,
    Stream,
    Transport,
    local_size,
    opened,
)


def resume_offset(local_path: LocalFile, remote_path: str, resume: bool) -> int:
    if not resume or not os.path.exists(remote_path):
        return 0
    have = os.path.getsize(remote_path)
    return have if have <= local_size(local_path) else 0


class ProcessStream(Stream):
    """A local command whose stdin stays open."""

    def __init__(self, command: str, stdin: bytes) -> None:
        self.process = subprocess.Popen(
            ["bash", "-c", command], stdin=subprocess.PIPE, stdout=subprocess.PIPE
        )
        self._buf = b""
        self.write(stdin.decode())

    def readline(self, timeout: float) -> str:
        out = self.process.stdout
        assert out is not None
        deadline = time.monotonic() + timeout
        while b"\n" not in self._buf:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([out], [], [], left)[0]:
                return ""
            chunk = os.read(out.fileno(), 1 << 16)
            if not chunk:
                return ""
            self._buf += chunk
        line, _, self._buf = self._buf.partition(b"\n")
        return line.decode("utf-8", errors="replace")

    def write(self, text: str) -> bool:
        try:
            assert self.process.stdin is not None
            self.process.stdin.write(text.encode())
            self.process.stdin.flush()
            return True
        except (OSError, ValueError):
            return False

    @property
    def ended(self) -> bool:
        return self.process.poll() is not None

    def close(self) -> None:
        for pipe in (self.process.stdin, self.process.stdout):
            if pipe is not None:
                pipe.close()
        self.process.wait()


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

    def put(self, local_path: LocalFile, remote_path: str, resume: bool = False,
            progress: Progress | None = None) -> None:
        start = resume_offset(local_path, remote_path, resume)
        with opened(local_path) as src, open(remote_path, "ab" if start else "wb") as dst:
            src.seek(start)
            if progress is None:
                return shutil.copyfileobj(src, dst, 1 << 20)
            while chunk := src.read(1 << 20):
                dst.write(chunk)
                start += len(chunk)
                progress(start)

    def get(self, remote_path: str, local_path: str) -> None:
        shutil.copyfile(remote_path, local_path)

    def open_stream(self, command: str, stdin: bytes) -> Stream:
        return ProcessStream(command, stdin)
