"""A download has an overall deadline (issue 18): a server that trickles bytes (one every
0.05 s, so no per-read timeout ever fires) is cut at the deadline, on the host (fetch.py)
and on the controller (a bundle's manifest, its executables)."""

from __future__ import annotations

import http.server
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from rollout.bundle import remote
from rollout.errors import EnvironmentProblem
from rollout.host.scripts import fetch

BODY = b"x" * 4096


class Trickle(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:  # noqa: N802 - http.server's name
        self.send_response(200)
        self.send_header("Content-Length", str(len(BODY)))
        self.end_headers()
        try:
            for i in range(len(BODY)):
                self.wfile.write(BODY[i:i + 1])
                self.wfile.flush()
                time.sleep(0.05)
        except OSError:
            pass  # the client gave up: what the test wants

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def trickle() -> Iterator[str]:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Trickle)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def test_the_host_fetch_ends_at_its_deadline(trickle: str, tmp_path: Path) -> None:
    started = time.monotonic()
    with pytest.raises(fetch.FetchFailed) as info:
        fetch.fetch_file(f"{trickle}/cuzk-bench", str(tmp_path / "b"), "0" * 64, len(BODY),
                         timeout=30, deadline=time.monotonic() + 0.3, sleep=lambda _: None)
    assert info.value.kind == "deadline", info.value
    assert time.monotonic() - started < 10


def test_fetch_py_takes_a_deadline_argument(trickle: str, tmp_path: Path,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    code = fetch.main(["--dir", str(tmp_path / "d"), "--deadline", "0.3", "--file", "b",
                       f"{trickle}/b", "0" * 64, str(len(BODY))])
    assert code == 1 and '"kind": "deadline"' in capsys.readouterr().out


def test_the_controller_manifest_read_ends_at_its_deadline(
    trickle: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(remote, "MANIFEST_DEADLINE", 0.3)
    started = time.monotonic()
    with pytest.raises(EnvironmentProblem, match="not complete within 0.3 s"):
        remote.fetch_manifest(trickle)
    assert time.monotonic() - started < 10
