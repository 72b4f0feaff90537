"""The host-side download (host/scripts/fetch.py) against the lab's web server, on loopback."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from http.server import ThreadingHTTPServer
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from rollout.host.scripts import script_text
from rollout.host.scripts.fetch import FetchFailed, fetch_file
from rollout.lab.webserver import Handler

DATA = bytes(range(256)) * 1000  # 256 000 bytes
SHA = hashlib.sha256(DATA).hexdigest()


@dataclass
class Server:
    url: str
    root: Path
    log: Path

    def requests(self, count: int) -> list[dict[str, Any]]:
        """The log once it holds `count` requests. The server logs a request after it has
        answered it, so the client can be done before its line is written: wait for it."""
        deadline = time.monotonic() + 60  # a safety net, not the thing tested
        while True:
            text = self.log.read_text() if self.log.exists() else ""
            lines = [json.loads(line) for line in text.splitlines()]
            if len(lines) >= count or time.monotonic() > deadline:
                return lines
            time.sleep(0.01)


@pytest.fixture
def server(tmp_path: Path) -> Iterator[Server]:
    root = tmp_path / "www"
    root.mkdir()
    (root / "f").write_bytes(DATA)
    Handler.opts = SimpleNamespace(root=str(root), log=str(tmp_path / "log.jsonl"),
                                   hold=str(tmp_path / "hold"))
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=httpd.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    yield Server(f"http://127.0.0.1:{httpd.server_address[1]}", root, tmp_path / "log.jsonl")
    httpd.shutdown()
    httpd.server_close()


def no_sleep(_seconds: float) -> None:
    pass


def test_download_checked(server: Server, tmp_path: Path) -> None:
    out = fetch_file(f"{server.url}/f", str(tmp_path / "f"), SHA, len(DATA), sleep=no_sleep)
    assert out["outcome"] == "downloaded" and out["received"] == len(DATA)
    assert (tmp_path / "f").read_bytes() == DATA
    again = fetch_file(f"{server.url}/f", str(tmp_path / "f"), SHA, len(DATA), sleep=no_sleep)
    assert again["outcome"] == "present"
    assert len(server.requests(1)) == 1


def test_a_cut_download_resumes_where_it_stopped(server: Server, tmp_path: Path) -> None:
    (tmp_path / "f").write_bytes(DATA[:100_000])
    out = fetch_file(f"{server.url}/f", str(tmp_path / "f"), SHA, len(DATA), sleep=no_sleep)
    assert out["resumed_from"] == 100_000 and out["received"] == len(DATA) - 100_000
    assert [r["range"] for r in server.requests(1)] == ["bytes=100000-"]
    assert (tmp_path / "f").read_bytes() == DATA


def test_a_stale_prefix_is_dropped_and_fetched_again(server: Server, tmp_path: Path) -> None:
    (tmp_path / "f").write_bytes(b"x" * 1000)
    fetch_file(f"{server.url}/f", str(tmp_path / "f"), SHA, len(DATA), sleep=no_sleep)
    assert [r["range"] for r in server.requests(2)] == ["bytes=1000-", None]
    assert (tmp_path / "f").read_bytes() == DATA


def test_a_corrupted_file_is_refused_and_deleted(server: Server, tmp_path: Path) -> None:
    (server.root / "f").write_bytes(b"X" + DATA[1:])
    with pytest.raises(FetchFailed) as e:
        fetch_file(f"{server.url}/f", str(tmp_path / "f"), SHA, len(DATA), sleep=no_sleep)
    assert e.value.kind == "sha256"
    assert not (tmp_path / "f").exists()


def test_http_errors_are_not_unreachable(server: Server, tmp_path: Path) -> None:
    with pytest.raises(FetchFailed) as e:
        fetch_file(f"{server.url}/missing", str(tmp_path / "f"), SHA, 1, sleep=no_sleep)
    assert e.value.kind == "http" and "404" in str(e.value)


def test_unreachable_after_bounded_retries(tmp_path: Path) -> None:
    waits: list[float] = []
    with pytest.raises(FetchFailed) as e:
        fetch_file("http://127.0.0.1:9/f", str(tmp_path / "f"), SHA, 10, retries=2,
                   sleep=waits.append)
    assert e.value.kind == "unreachable"
    assert len(waits) == 2


def test_script_as_sent(server: Server, tmp_path: Path) -> None:
    """The script text a host gets: one JSON line; exit 3 when nothing could be reached."""
    def run(*files: str) -> tuple[int, dict[str, Any]]:
        argv = [sys.executable, "-", "--dir", str(tmp_path / "p"), "--retries", "0", *files]
        p = subprocess.run(argv, input=script_text("fetch"), capture_output=True, text=True)
        return p.returncode, json.loads(p.stdout.strip().splitlines()[-1])

    code, out = run("--file", "a", f"{server.url}/f", SHA, str(len(DATA)))
    assert code == 0 and out["error"] is None and out["files"]["a"]["outcome"] == "downloaded"
    code, out = run("--file", "b", "http://127.0.0.1:9/f", SHA, "5")
    assert code == 3 and out["error"]["kind"] == "unreachable" and out["error"]["file"] == "b"


def test_a_whole_but_stale_file_is_fetched_again(server: Server, tmp_path: Path) -> None:
    (tmp_path / "f").write_bytes(b"y" * len(DATA))  # a complete file of another release
    out = fetch_file(f"{server.url}/f", str(tmp_path / "f"), SHA, len(DATA), sleep=no_sleep)
    assert out["outcome"] == "downloaded" and [r["range"] for r in server.requests(1)] == [None]
    assert (tmp_path / "f").read_bytes() == DATA


def test_the_controller_reads_only_the_manifest(server: Server, tmp_path: Path) -> None:
    from rollout.bundle.manifest import manifest_for
    from rollout.bundle.release import release_id_of
    from rollout.bundle.remote import release_urls, remote_release
    from rollout.errors import UserError
    from rollout.steps.base import Artifact, Release

    artifacts = (Artifact("f", "", SHA, len(DATA)),)
    release = Release(release_id_of(artifacts), "img", "v1", artifacts)
    (server.root / "r1").mkdir()
    (server.root / "r1" / "manifest.json").write_text(
        manifest_for(release, None, {}, None, "now").to_json())
    got = remote_release(f"{server.url}/r1/", tmp_path)
    assert got.id == release.id and got.source == f"{server.url}/r1"
    assert release_urls(got) == {"f": f"{server.url}/r1/f"}
    assert [r["path"] for r in server.requests(1)] == ["/r1/manifest.json"]
    with pytest.raises(UserError, match="HTTP 404"):
        remote_release(f"{server.url}/r2", tmp_path)
    (server.root / "big").mkdir()
    (server.root / "big" / "manifest.json").write_bytes(b" " * (2 << 20))
    with pytest.raises(UserError, match="too large"):
        remote_release(f"{server.url}/big", tmp_path)
    paths = [r["path"] for r in server.requests(3)]  # each manifest once, nothing else
    assert paths == ["/r1/manifest.json", "/r2/manifest.json", "/big/manifest.json"]


# Proof parameters: filecoin-proofs' digest, sizes nobody published, files used in place.

B2 = hashlib.blake2b(DATA).hexdigest()[:32]


def test_the_params_digest_is_the_first_16_bytes_of_blake2b_512(tmp_path: Path) -> None:
    from rollout.host.scripts.fetch import digest_of, parse_digest

    (tmp_path / "f").write_bytes(DATA)
    assert digest_of(str(tmp_path / "f"), "blake2b") == B2
    assert hashlib.blake2b(DATA, digest_size=16).hexdigest() != B2  # not blake2b-128
    assert parse_digest(f"blake2b:{B2.upper()}") == ("blake2b", B2)
    assert parse_digest(SHA) == parse_digest(f"sha256:{SHA}") == ("sha256", SHA)
    assert parse_digest("-") == (None, "")
    for bad in ("blake2b:" + SHA, "md5:" + B2, "sha256:" + B2):
        with pytest.raises(ValueError):
            parse_digest(bad)


def test_an_unknown_size_is_the_servers_and_a_cut_resumes(server: Server, tmp_path: Path) -> None:
    (tmp_path / "f").write_bytes(DATA[:7000])
    out = fetch_file(f"{server.url}/f", str(tmp_path / "f"), f"blake2b:{B2}", None,
                     sleep=no_sleep)
    assert out["outcome"] == "downloaded" and out["resumed_from"] == 7000
    assert [(r["method"], r["range"]) for r in server.requests(2)] == [
        ("HEAD", None), ("GET", "bytes=7000-")]
    assert (tmp_path / "f").read_bytes() == DATA


def test_a_blake2b_mismatch_is_refused_with_both_digests(server: Server, tmp_path: Path) -> None:
    (server.root / "f").write_bytes(b"X" + DATA[1:])
    with pytest.raises(FetchFailed) as e:
        fetch_file(f"{server.url}/f", str(tmp_path / "f"), f"blake2b:{B2}", len(DATA),
                   sleep=no_sleep)
    have = hashlib.blake2b(b"X" + DATA[1:]).hexdigest()[:32]
    assert e.value.kind == "digest" and f"blake2b {have}, expected {B2}" in str(e.value)
    assert not (tmp_path / "f").exists()


def params(tmp_path: Path, *argv: str) -> tuple[int, dict[str, Any]]:
    """fetch.py --partial as a host runs it, on this machine."""
    args = [sys.executable, "-", "--dir", str(tmp_path / "cache"), "--partial", "--retries",
            "0", "--reuse", str(tmp_path / "curio"), *argv]
    p = subprocess.run(args, input=script_text("fetch"), capture_output=True, text=True,
                       env={"PATH": "/usr/bin:/bin"})
    return p.returncode, json.loads(p.stdout.strip().splitlines()[-1])


def test_params_are_linked_from_curios_folder_and_checked_once(tmp_path: Path) -> None:
    (tmp_path / "curio").mkdir()
    there = tmp_path / "curio" / "p.params"
    there.write_bytes(DATA)
    code, out = params(tmp_path, "--file", "p.params", "http://127.0.0.1:9/x",
                       f"blake2b:{B2}", "-")
    assert code == 0 and out["files"]["p.params"] == {
        "outcome": "reused", "path": str(there), "received": 0}  # the gateway never asked
    assert os.readlink(tmp_path / "cache" / "p.params") == str(there)
    # Changed in place with its size and times kept: the stamp says it was checked (the
    # files are curio's and rollout's own; a stat that changes is hashed again).
    stat = there.stat()
    there.write_bytes(b"Z" + DATA[1:])
    os.utime(there, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    assert params(tmp_path, "--file", "p.params", "-", f"blake2b:{B2}", "-")[0] == 0
    there.touch()
    code, out = params(tmp_path, "--file", "p.params", "-", f"blake2b:{B2}", "-")
    assert code == 1 and out["error"]["kind"] == "digest"
    assert f"{there}: blake2b " in out["error"]["message"]


def test_a_truncated_param_is_refused_by_size_and_kept(tmp_path: Path) -> None:
    (tmp_path / "cache").mkdir()
    (tmp_path / "cache" / "p.params").write_bytes(DATA[:10])
    code, out = params(tmp_path, "--file", "p.params", "-", f"blake2b:{B2}", str(len(DATA)))
    assert code == 1 and out["error"]["kind"] == "size"
    assert f"p.params: 10 bytes, expected {len(DATA)}" in out["error"]["message"]
    assert (tmp_path / "cache" / "p.params").read_bytes() == DATA[:10]


def test_a_missing_param_goes_through_its_partial(server: Server, tmp_path: Path) -> None:
    code, out = params(tmp_path, "--file", "p.params", f"{server.url}/f", f"blake2b:{B2}",
                       str(len(DATA)))
    assert code == 0 and out["files"]["p.params"]["outcome"] == "downloaded"
    assert (tmp_path / "cache" / "p.params").read_bytes() == DATA
    assert sorted(p.name for p in (tmp_path / "cache").iterdir()) == [
        ".verified.json", "p.params"]
