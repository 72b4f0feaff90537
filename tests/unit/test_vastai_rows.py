"""One bad vast.ai row fails only its host: a row with a control character in any text, a
bad address or port, or fields of the wrong types is skipped with its reason and the
other instances are hosts; the whole listing has a deadline, however slowly it comes."""

from __future__ import annotations

import contextlib
import json
import threading
import time
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from rollout.config import vastai
from rollout.config.inventory import load_inventory
from rollout.errors import EnvironmentProblem

KEY = "vast-rows-key-0123456789"


def row(index: int, **fields: Any) -> dict[str, Any]:
    return {"id": 51000000 + index, "label": f"prover-{index}", "actual_status": "running",
            "ssh_host": f"ssh{index}.vast.ai", "ssh_port": 20000 + index, "num_gpus": 1,
            "gpu_name": "RTX 4090", **fields}


@pytest.fixture
def answer(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Callable[[list[Any]], None]:
    """The API answers one page with these rows."""
    monkeypatch.setenv("VAST_API_KEY", KEY)
    monkeypatch.setenv("HOME", str(tmp_path))

    def rows(listed: list[Any]) -> None:
        body = json.dumps({"instances": listed, "next_token": None}).encode()
        monkeypatch.setattr(vastai, "open_api", lambda key: lambda query: (200, body))

    return rows


HOSTILE = [
    (row(2, gpu_name="RTX\x1b[2J4090"), "gpu_name: holds a control character"),
    (row(2, label="prover-2\x07"), "label: holds a control character"),
    (row(2, ssh_host="-oProxyCommand=id"), "no usable proxy SSH address ('-oProxyCommand=id')"),
    (row(2, ssh_host="ssh2.vast.ai\n"), "ssh_host: holds a control character"),
    (row(2, ssh_port=70000), "no usable proxy SSH port (70000)"),
    (row(2, ssh_port="22; id"), "ssh_port: Input should be a valid integer"),
    (row(2, num_gpus=[1]), "num_gpus: Input should be a valid integer"),
    (row(2, actual_status={"running": True}), "actual_status: Input should be a valid string"),
    (row(2, ports={"22/tcp\x1b": []}), "ports.22/tcp\\x1b.[key]: holds a control character"),
    (row(2, gpu_name="x" * 300), "gpu_name: String should have at most 256 characters"),
]


@pytest.mark.parametrize("bad, reason", HOSTILE)
def test_a_hostile_row_is_refused_with_its_reason_the_others_load(
        answer: Callable[[list[Any]], None], bad: dict[str, Any], reason: str) -> None:
    answer([row(1), bad, row(3)])
    inventory = load_inventory("vastai:prover-*")
    assert [h.name for h in inventory.hosts] == ["prover-1", "prover-3"]
    assert list(inventory.refused) == ["prover-2"] and not inventory.skipped
    why = inventory.refused["prover-2"]
    assert why.startswith("vast.ai instance 51000002: ") and reason in why
    assert why.isprintable() and why.isascii()  # shown escaped, never raw


def test_rows_that_are_no_instance_at_all_are_skipped(
        answer: Callable[[list[Any]], None]) -> None:
    answer([row(1), "a string", None, {"id": "7", "label": "prover-7"}, {"label": "prover-8"},
            {"id": -1, "label": "prover-9"}])
    inventory = load_inventory("vastai:*")
    assert [h.name for h in inventory.hosts] == ["prover-1"]
    assert all(s.startswith("an instance without a usable id: its row does not validate")
               for s in inventory.skipped)
    assert len(inventory.skipped) == 5  # a row with no label matches `*` too


def test_a_control_character_in_a_row_never_reaches_a_host_var(
        answer: Callable[[list[Any]], None]) -> None:
    answer([row(1, gpu_name="RTX\u00854090"), row(3)])  # C1 NEL
    inventory = load_inventory("vastai:prover-*")
    assert [h.name for h in inventory.hosts] == ["prover-3"]
    assert inventory.get("prover-3").vars["gpu_model"] == "RTX 4090"


@contextlib.contextmanager
def serve(handler: type[BaseHTTPRequestHandler]) -> Iterator[str]:
    """A loopback HTTP server with this handler, for the test's time: its URL."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        thread.join(timeout=10)


@pytest.fixture
def trickling() -> Iterator[str]:
    """A loopback API that answers 200 and then one byte of its body every 0.2 s."""
    stop = threading.Event()

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 (http.server's name)
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.end_headers()
            for byte in b'{"instances": []' + b" " * 10_000:
                if stop.wait(0.2):
                    return
                self.wfile.write(bytes([byte]))
                self.wfile.flush()

        def log_message(self, *args: Any) -> None:
            pass

    with serve(Handler) as url:
        yield url
        stop.set()


@pytest.mark.timeout(30)
def test_a_server_that_trickles_is_cut_by_the_overall_deadline(
        trickling: str, monkeypatch: pytest.MonkeyPatch) -> None:
    client = pytest.importorskip("vastai.api.client")
    monkeypatch.setattr(client, "server_url_default", trickling)
    monkeypatch.setattr(vastai, "LIST_DEADLINE", 2.0)
    started = time.monotonic()
    with pytest.raises(EnvironmentProblem, match="did not list the instances within 2 s") as e:
        vastai.fetch_instances(vastai.open_api(KEY))
    assert e.value.exit_code == 3
    assert time.monotonic() - started < 6  # each read came within its 30 s timeout


@pytest.fixture
def busy_once() -> Iterator[tuple[str, list[str]]]:
    """A loopback API that answers 503 (Retry-After: 0) to the first request, then a page."""
    seen: list[str] = []

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 (http.server's name)
            seen.append(self.path)
            first = len(seen) == 1
            body = b"busy" if first else json.dumps({"instances": [row(3)]}).encode()
            self.send_response(503 if first else 200)
            self.send_header("Retry-After", "0")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: Any) -> None:
            pass

    with serve(Handler) as url:
        yield url, seen


@pytest.mark.timeout(30)
def test_a_busy_answer_is_tried_again(busy_once: tuple[str, list[str]],
                                      monkeypatch: pytest.MonkeyPatch) -> None:
    client = pytest.importorskip("vastai.api.client")
    url, seen = busy_once
    monkeypatch.setattr(client, "server_url_default", url)
    rows = vastai.fetch_instances(vastai.open_api(KEY))
    assert len(rows) == 1 and len(seen) == 2
