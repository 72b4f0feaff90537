"""Download a release's executables from the URL they were published at, on the host.

Run on the host: python3 - --dir DIR --file NAME URL SHA256 SIZE [--file ...] < fetch.py
Each file goes to DIR/NAME. Before the first request to a server, its port must accept a
connection within --connect-timeout seconds (a firewall that drops packets fails fast, as
unreachable). With --progress SECONDS it prints, while it runs, a line
{"progress": {"file": NAME, "bytes": N}} at most every SECONDS per file (N: the bytes of
that file on disk); with --tether it exits (status 4) once its stdin ends: the controller
that reads its progress is gone. A file cut short is resumed where it stopped (HTTP Range),
with a bounded number of retries; a finished file is checked against its sha256 and
size, and a mismatch is deleted and refused. With --deadline SECONDS the whole download
ends by then (kind "deadline"), however slowly bytes trickle in: a per-read timeout alone
never ends a server that sends a byte every few seconds. Prints one JSON object; exit 0: every file
is there and checked; 3: the URL could not be reached at all (nothing was received);
1: anything else (HTTP error, sha256 mismatch, too many interruptions).
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import http.client
import json
import os
import socket
import sys
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable
from typing import Any

from rollout.host.scripts.common import safe_mkdir, safe_open  # inlined on hosts

CHUNK = 1 << 20
RETRYABLE_HTTP = (408, 425, 429, 500, 502, 503, 504)


class FetchFailed(Exception):
    """kind: unreachable (nothing ever answered), http, sha256, interrupted."""

    def __init__(self, kind: str, message: str) -> None:
        super().__init__(message)
        self.kind = kind


def sha256_of(path: str) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(CHUNK), b""):
            h.update(chunk)
    return h.hexdigest()


def _size(path: str) -> int:
    try:
        return os.path.getsize(path)
    except OSError:
        return 0


def _open(url: str, offset: int, timeout: float) -> Any:
    request = urllib.request.Request(url, headers={"User-Agent": "rollout-fetch/1"})
    if offset:
        request.add_header("Range", f"bytes={offset}-")
    try:
        return urllib.request.urlopen(request, timeout=timeout)
    except urllib.error.HTTPError as e:
        if e.code == 416:  # what we hold is not a prefix of the file: start over
            return None
        kind = "retry" if e.code in RETRYABLE_HTTP else "http"
        raise FetchFailed(kind, f"HTTP {e.code} from {url}") from e


def _start_at(response: Any, offset: int) -> int:
    """Where the body starts: `offset` for 206 with a matching Content-Range, else 0."""
    if offset and response.status == 206:
        got = response.headers.get("Content-Range", "")
        if got.startswith(f"bytes {offset}-"):
            return offset
        raise FetchFailed("http", f"asked from byte {offset}, got Content-Range {got!r}")
    return 0


Report = Callable[[int], None]


class Reporter:
    """Prints a file's progress line at most every `interval` seconds (never when 0)."""

    def __init__(self, interval: float, clock: Callable[[], float] = time.monotonic,
                 out: Any = None) -> None:
        self.interval, self.clock, self.out = interval, clock, out or sys.stdout
        self._last: dict[str, float] = {}

    def for_file(self, name: str) -> Report:
        return lambda done: self.report(name, done)

    def report(self, name: str, done: int, force: bool = False) -> None:
        now = self.clock()
        last = self._last.get(name)
        if self.interval <= 0 or (not force and last is not None and now - last < self.interval):
            return
        self._last[name] = now
        self.out.write(json.dumps({"progress": {"file": name, "bytes": done}}) + "\n")
        self.out.flush()


def _no_report(_done: int) -> None:
    pass


def probe(url: str, timeout: float) -> None:
    """Raise FetchFailed("unreachable") unless the URL's server accepts a TCP connection
    within `timeout` seconds. Skipped where a proxy would carry the request."""
    parts = urllib.parse.urlsplit(url)
    if parts.scheme not in ("http", "https") or urllib.request.getproxies().get(parts.scheme):
        return
    port = parts.port or (443 if parts.scheme == "https" else 80)
    try:
        socket.create_connection((parts.hostname or "", port), timeout=timeout).close()
    except OSError as e:
        raise FetchFailed("unreachable", f"{parts.hostname}:{port} did not accept a "
                          f"connection within {timeout:g} s: {e}") from e


def tether(stdin: Any) -> None:
    """Exit the whole process once `stdin` ends (the controller closed it or went away)."""
    def watch() -> None:
        with contextlib.suppress(OSError, ValueError):
            while stdin.read(4096):
                pass
        os._exit(4)

    threading.Thread(target=watch, daemon=True).start()


def past(deadline: float | None, url: str) -> None:
    """FetchFailed("deadline") once the monotonic clock passed `deadline` (None: no deadline)."""
    if deadline is not None and time.monotonic() > deadline:
        raise FetchFailed("deadline", f"{url}: not complete by the download deadline")


def read_timeout(timeout: float, deadline: float | None) -> float:
    """The per-read timeout, never past the deadline (at least 0.1 s)."""
    return timeout if deadline is None else max(0.1, min(timeout, deadline - time.monotonic()))


def _copy_body(response: Any, path: str, start: int, size: int,
               report: Report = _no_report, deadline: float | None = None) -> int:
    """Append (from `start`) at most up to `size`; the bytes received."""
    received = 0
    read = getattr(response, "read1", response.read)  # what has arrived: a cut keeps it
    with os.fdopen(safe_open(path, os.O_RDWR | os.O_CREAT, 0o644), "r+b") as f:  # no link
        f.seek(start)
        f.truncate()
        while start + received < size:
            past(deadline, path)
            chunk = read(min(CHUNK, size - start - received))
            if not chunk:
                break
            f.write(chunk)
            f.flush()
            received += len(chunk)
            report(start + received)
        os.fsync(f.fileno())
    return received


def _attempt(url: str, path: str, size: int, timeout: float, out: dict[str, Any],
             report: Report = _no_report, deadline: float | None = None) -> None:
    offset = _size(path)
    if offset >= size:
        return
    past(deadline, url)
    response = _open(url, offset, read_timeout(timeout, deadline))
    out["answered"] = True
    if response is None:
        os.unlink(path)
        out["restarts"] = out.get("restarts", 0) + 1
        return _attempt(url, path, size, timeout, out, report, deadline)
    with response:
        start = _start_at(response, offset)
        if start:
            out.setdefault("resumed_from", start)
        received = _copy_body(response, path, start, size, report, deadline)
        out["received"] = out.get("received", 0) + received


def _checked(path: str, sha256: str, size: int) -> bool:
    return _size(path) == size and sha256_of(path) == sha256


def fetch_file(
    url: str,
    path: str,
    sha256: str,
    size: int,
    retries: int = 4,
    timeout: float = 30.0,
    sleep: Callable[[float], None] = time.sleep,
    report: Report = _no_report,
    deadline: float | None = None,
) -> dict[str, Any]:
    """Bring `path` to the file at `url` with this sha256 and size; what it took, as data.
    `deadline`: a time.monotonic() value the whole download must end by (FetchFailed)."""
    out: dict[str, Any] = {"answered": False}
    if os.path.exists(path) and _checked(path, sha256, size):
        return {**out, "outcome": "present", "received": 0}
    if _size(path) >= size and os.path.exists(path):  # whole, yet not this file: stale
        os.unlink(path)
    fresh_start_left = 1
    for attempt in range(retries + 1):
        try:
            _attempt(url, path, size, timeout, out, report, deadline)
        except FetchFailed as e:
            if e.kind == "deadline":
                raise
            if e.kind != "retry" or attempt == retries:
                raise FetchFailed("http", str(e)) from e
        except (OSError, http.client.HTTPException) as e:  # timeouts are OSErrors
            if attempt == retries:
                kind = "interrupted" if out["answered"] else "unreachable"
                raise FetchFailed(kind, f"{url}: {getattr(e, 'reason', e)}") from e
        else:
            if _size(path) >= size:
                if _checked(path, sha256, size):
                    return {**out, "outcome": "downloaded"}
                os.unlink(path)
                if not out.get("resumed_from") or not fresh_start_left:
                    raise FetchFailed("sha256", f"{url}: sha256 differs from the manifest's")
                fresh_start_left -= 1  # a resumed prefix may be stale: once from scratch
                out.pop("resumed_from")
                continue
        past(deadline, url)
        sleep(min(8.0, 0.5 * 2**attempt))
    raise FetchFailed("interrupted", f"{url}: still incomplete after {retries + 1} attempts")


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--dir", required=True)
    p.add_argument("--file", nargs=4, action="append", default=[],
                   metavar=("NAME", "URL", "SHA256", "SIZE"))
    p.add_argument("--retries", type=int, default=4)
    p.add_argument("--timeout", type=float, default=30.0)
    p.add_argument("--connect-timeout", type=float, default=0.0)
    p.add_argument("--progress", type=float, default=0.0)
    p.add_argument("--deadline", type=float, default=0.0, help="seconds for it all (0: none)")
    p.add_argument("--tether", action="store_true")
    args = p.parse_args(argv)
    if args.tether:
        tether(sys.stdin.buffer)
    safe_mkdir(args.dir)
    files: dict[str, Any] = {}
    reporter = Reporter(args.progress)
    probed: set[str] = set()
    deadline = time.monotonic() + args.deadline if args.deadline > 0 else None
    for name, url, sha256, size in args.file:
        try:
            _probe_once(url, args.connect_timeout, probed)
            files[name] = fetch_file(url, os.path.join(args.dir, name), sha256, int(size),
                                     args.retries, args.timeout,
                                     report=reporter.for_file(name), deadline=deadline)
            reporter.report(name, int(size), force=True)
        except FetchFailed as e:
            print(json.dumps({"files": files, "error": {"kind": e.kind, "file": name,
                                                        "message": str(e)}}))
            return 3 if e.kind == "unreachable" and not files else 1
    print(json.dumps({"files": files, "error": None}))
    return 0


def _probe_once(url: str, timeout: float, probed: set[str]) -> None:
    server = urllib.parse.urlsplit(url).netloc
    if timeout > 0 and server not in probed:
        probe(url, timeout)
        probed.add(server)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
