"""The host-side download's progress (issue 19): its progress lines as it runs, read by the
controller through a stream while it runs; its connect bound; its tether to the controller.
Against the lab's web server on loopback, the download a real python3 process."""

from __future__ import annotations

import hashlib
import io
import json
import socket
import threading
import time
import urllib.request
from collections.abc import Iterator
from http.server import ThreadingHTTPServer
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from contexts import host_context

from rollout.host.scripts import fetch
from rollout.host.scripts.fetch import FetchFailed, Reporter, probe
from rollout.lab.webserver import Handler
from rollout.steps.decision import Artifact, Release
from rollout.steps.pull import fetch_command, follow, parse_report
from rollout.transport.local import LocalTransport, ProcessStream

DATA = bytes(range(256)) * 4000  # 1 024 000 bytes
SHA = hashlib.sha256(DATA).hexdigest()


@pytest.fixture
def server(tmp_path: Path) -> Iterator[SimpleNamespace]:
    root = tmp_path / "www"
    root.mkdir()
    (root / "f").write_bytes(DATA)
    hold = tmp_path / "hold"
    Handler.opts = SimpleNamespace(root=str(root), log=str(tmp_path / "log.jsonl"),
                                   hold=str(hold))
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=httpd.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    yield SimpleNamespace(url=f"http://127.0.0.1:{httpd.server_address[1]}", hold=hold)
    hold.unlink(missing_ok=True)
    httpd.shutdown()
    httpd.server_close()


def test_the_reporter_prints_a_line_per_interval_per_file() -> None:
    now = [0.0]
    out = io.StringIO()
    reporter = Reporter(1.0, clock=lambda: now[0], out=out)
    report = reporter.for_file("a")
    for step in range(25):  # 2.5 s of chunks every 0.1 s
        now[0] = step / 10
        report(step * 10)
    reporter.report("a", 1000, force=True)
    lines = [json.loads(line)["progress"] for line in out.getvalue().splitlines()]
    assert lines == [{"file": "a", "bytes": b} for b in (0, 100, 200, 1000)]
    silent = io.StringIO()
    Reporter(0.0, out=silent).report("a", 5, force=True)
    assert silent.getvalue() == ""  # --progress 0: no lines at all


def test_a_server_that_refuses_is_unreachable_at_once() -> None:
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    sock.close()  # nothing listens there now
    with pytest.raises(FetchFailed) as e:
        probe(f"http://127.0.0.1:{port}/r/f", 5.0)
    assert e.value.kind == "unreachable" and "within 5 s" in str(e.value)


def test_a_firewall_that_drops_packets_costs_the_connect_timeout_only(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    asked: list[Any] = []

    def dropped(address: Any, timeout: float) -> socket.socket:
        asked.append((address, timeout))
        raise TimeoutError("timed out")

    monkeypatch.setattr(socket, "create_connection", dropped)
    monkeypatch.setattr(urllib.request, "getproxies", dict)  # fetch imports it where used
    out = io.StringIO()
    monkeypatch.setattr("sys.stdout", out)
    code = fetch.main(["--dir", str(tmp_path), "--connect-timeout", "10", "--retries", "3",
                       "--file", "f", "http://10.9.9.9:8080/r/f", SHA, str(len(DATA))])
    assert code == 3 and asked == [(("10.9.9.9", 8080), 10.0)]  # one try, no retries
    error = json.loads(out.getvalue().splitlines()[-1])["error"]
    assert error["kind"] == "unreachable" and "within 10 s" in error["message"]


class Recorder:
    def __init__(self) -> None:
        self.events: list[tuple[str, dict[str, Any]]] = []

    def __call__(self, kind: str, **fields: Any) -> None:
        self.events.append((kind, fields))


def _release(url: str) -> Release:
    return Release("0123456789ab", "img", "v1", (Artifact("f", "/nowhere", SHA, len(DATA)),),
                   source=url)


def _args(tmp_path: Path, url: str) -> list[str]:
    return ["--dir", str(tmp_path / "dl"), "--connect-timeout", "5",
            "--file", "f", f"{url}/f", SHA, str(len(DATA))]


def test_the_controller_reads_progress_while_the_download_runs(
    server: SimpleNamespace, tmp_path: Path
) -> None:
    emit = Recorder()
    ctx = host_context(transport=LocalTransport(), emit=emit)
    server.hold.write_text("300000")  # the download stops there until the hold is lifted
    stream = LocalTransport().open_stream(*fetch_command(_args(tmp_path, server.url)))
    release = _release(server.url)

    def lift_when_seen() -> None:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and not emit.events:
            time.sleep(0.01)
        server.hold.unlink()

    lifter = threading.Thread(target=lift_when_seen)
    lifter.start()
    try:
        report = follow(ctx, stream, release)
    finally:
        stream.close()
        lifter.join()
    assert report["error"] is None and report["files"]["f"]["outcome"] == "downloaded"
    data = [f["data"] for k, f in emit.events if k == "progress"]
    # the first came while the download was held: the hold is lifted only once it came
    assert 0 < data[0]["bytes"] <= 300000 and data[0]["total"] == len(DATA)
    assert data[-1]["bytes"] == len(DATA)
    assert (tmp_path / "dl" / "f").read_bytes() == DATA


def test_a_tethered_download_exits_0_once_done_never_aborted_at_exit(
    server: SimpleNamespace, tmp_path: Path
) -> None:
    stream = LocalTransport().open_stream(*fetch_command(_args(tmp_path, server.url)))
    assert isinstance(stream, ProcessStream)
    try:
        lines = iter(lambda: stream.readline(60), "")
        report = next(r for r in map(parse_report, lines) if r is not None)
        # its stdin still open: the tether's reader must not hold up the interpreter's exit
        # (it held sys.stdin's lock: a second's wait, then SIGABRT, after every download)
        assert stream.process.wait(timeout=60) == 0
    finally:
        stream.close()
    assert report["error"] is None and report["files"]["f"]["outcome"] == "downloaded"


def test_the_download_ends_when_the_controller_closes_its_stdin(
    server: SimpleNamespace, tmp_path: Path
) -> None:
    server.hold.write_text("1000")
    stream = LocalTransport().open_stream(*fetch_command(_args(tmp_path, server.url)))
    assert isinstance(stream, ProcessStream)
    line = json.loads(stream.readline(60))
    assert line["progress"]["file"] == "f" and 0 < line["progress"]["bytes"] <= 1000
    assert stream.process.stdin is not None
    stream.process.stdin.close()  # the controller is gone
    assert stream.process.wait(timeout=60) == 4
