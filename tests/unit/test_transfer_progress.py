"""Progress of the staging transfers (issue 19): a params file or the validation input put
from the controller, and a params file the host downloads itself with curl, watched while
it runs. Against this machine (LocalTransport) and the lab's web server on loopback."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from http.server import ThreadingHTTPServer
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from contexts import host_context, small_host
from fakehost import CannedStream

from rollout.lab.webserver import Handler
from rollout.steps.base import HostContext
from rollout.steps.transfer import put_file, run_watched
from rollout.transport.base import Stream
from rollout.transport.local import LocalTransport

DATA = bytes(range(256)) * 4000  # 1 024 000 bytes


class Recorder:
    def __init__(self) -> None:
        self.data: list[dict[str, Any]] = []

    def __call__(self, kind: str, **fields: Any) -> None:
        assert kind in ("progress", "host_call")
        if kind == "progress":  # a put is also a host_call event, as the plan lists it
            self.data.append(fields["data"])


def context(emit: Recorder, transport: LocalTransport | None = None) -> HostContext:
    return host_context(small_host("h"), transport or LocalTransport("h"), emit=emit)


def test_a_put_reports_the_bytes_on_the_host_resumed_ones_included(tmp_path: Path) -> None:
    local, remote = tmp_path / "src", tmp_path / "dst"
    local.write_bytes(DATA * 3)
    remote.write_bytes(DATA[:100_000])  # an earlier try stopped there
    emit = Recorder()
    put_file(context(emit), str(local), str(remote), "params")
    assert remote.read_bytes() == DATA * 3
    assert emit.data[0]["what"] == "params" and emit.data[0]["total"] == len(DATA) * 3
    assert emit.data[0]["bytes"] > 100_000  # counted from what was there
    assert emit.data[-1]["bytes"] == len(DATA) * 3


@pytest.fixture
def slow_server(tmp_path: Path) -> Iterator[str]:
    """The lab's web server on loopback; while tmp_path/hold holds N, a download stops after
    N bytes until the file is removed."""
    root = tmp_path / "www"
    root.mkdir()
    (root / "f").write_bytes(DATA)
    Handler.opts = SimpleNamespace(root=str(root), log=str(tmp_path / "log.jsonl"),
                                   hold=str(tmp_path / "hold"))
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=httpd.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}"
    (tmp_path / "hold").unlink(missing_ok=True)
    httpd.shutdown()
    httpd.server_close()


class LiftsTheHold(Recorder):
    """Records the progress, and lets a held download go on once a size between nothing
    and all of it was reported: it was seen while it ran."""

    def __init__(self, hold: Path) -> None:
        super().__init__()
        self.hold = hold

    def __call__(self, kind: str, **fields: Any) -> None:
        super().__call__(kind, **fields)
        if 0 < fields["data"]["bytes"] < fields["data"]["total"]:
            self.hold.unlink(missing_ok=True)


def test_a_host_download_is_watched_while_it_runs(slow_server: str, tmp_path: Path) -> None:
    (tmp_path / "hold").write_text(str(len(DATA) // 3))  # held there until a size is seen
    emit = LiftsTheHold(tmp_path / "hold")
    target = tmp_path / "dl"
    ctx = context(emit)
    ctx.deadline = time.monotonic() + 60  # a size never reported: the step's deadline fails it
    code, said = run_watched(ctx, f"curl -fsSL -o {target} -- {slow_server}/f",
                             str(target), len(DATA), "params", every=0.1)
    assert code == 0, said
    assert target.read_bytes() == DATA
    during = [d for d in emit.data if 0 < d["bytes"] < len(DATA)]
    assert during and all(d["what"] == "params" for d in emit.data), emit.data


def test_a_failed_download_says_why(slow_server: str, tmp_path: Path) -> None:
    code, said = run_watched(context(Recorder()),
                             f"curl -fsSL -o {tmp_path / 'x'} -- {slow_server}/missing",
                             str(tmp_path / "x"), 10, "params")
    assert code == 22 and "404" in said


class Says(LocalTransport):
    def __init__(self, lines: list[str]) -> None:
        super().__init__("h")
        self.lines = lines

    def open_stream(self, command: str, stdin: bytes) -> Stream:
        return CannedStream(self.lines)


def test_hostile_lines_are_no_progress_and_no_exit() -> None:
    emit = Recorder()
    lines = ["size 10", "size -5", "size 1e9", "size 99999999999999999999999", " size 20",
             "exit 0; rm -rf /", "exit", "exit 1234", "\x1b[2J", "size 40", "exit 7"]
    code, said = run_watched(context(emit, Says(lines)), "true", "/x", 100, "params")
    assert code == 7
    assert [d["bytes"] for d in emit.data] == [10]  # 40 came within the second
    assert "exit 0; rm -rf /" in said and "size -5" in said


def test_a_stream_that_ends_without_its_status_is_a_failure() -> None:
    code, _ = run_watched(context(Recorder(), Says(["size 1"])), "true", "/x", 100, "params")
    assert code == 255
