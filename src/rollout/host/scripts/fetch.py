"""Download files on the host: a release's executables from the URL they were published
at, or proof parameters from a gateway that serves them by CID.

Run on the host: python3 - --dir DIR --file NAME URL DIGEST SIZE [--file ...] < fetch.py
Each file goes to DIR/NAME. DIGEST: a sha256 (64 hex digits, or `sha256:HEX`), or
`blake2b:HEX`, filecoin-proofs' digest (the hex of the first 16 bytes of the blake2b-512
sum), or `-` (none); SIZE: bytes, or `-` where unknown (learnt from the server). Before the
first request to a server, its port must accept a
connection within --connect-timeout seconds (a firewall that drops packets fails fast, as
unreachable). With --progress SECONDS it prints, while it runs, a line
{"progress": {"file": NAME, "bytes": N}} at most every SECONDS per file (N: the bytes of
that file on disk); with --tether it exits (status 4) once its stdin ends: the controller
that reads its progress is gone. A file cut short is resumed where it stopped (HTTP Range),
with a bounded number of retries; a finished file is checked against its digest and
size, and a mismatch is deleted and refused. With --deadline SECONDS the whole download
ends by then (kind "deadline"), however slowly bytes trickle in: a per-read timeout alone
never ends a server that sends a byte every few seconds.

With --partial (proof parameters) a file already in DIR, or in a --reuse folder, is checked
where it is (a file of a --reuse folder is then linked from DIR, never copied), and one that
fails its size or digest is refused, never replaced; a missing one is written to
DIR/NAME.partial (resumed there) and moved to DIR/NAME once checked. URL `-`: no download,
only a complete NAME.partial put there by the controller. What was hashed is remembered in
DIR/.verified.json by size, inode and time, so an unchanged file is not hashed again.

Prints one JSON object; exit 0: every file is there and checked; 3: the URL could not be
reached at all (nothing was received); 1: anything else (HTTP error, digest or size
mismatch, too many interruptions).
"""

from __future__ import annotations

import argparse
import contextlib
import errno
import functools
import hashlib
import json
import os
import sys
import time
from collections.abc import Callable
from typing import Any

from rollout.host.scripts.common import safe_mkdir, safe_open, safe_write  # inlined on hosts

# urllib, http.client, socket and threading are imported in the functions that download:
# a check of files already there (each rollout's preflight, on every host, through the
# host's agent) never loads them: 56 to 68 ms of a lab host's CPU, measured on a busy machine.

CHUNK = 1 << 20
RETRYABLE_HTTP = (408, 425, 429, 500, 502, 503, 504)


class FetchFailed(Exception):
    """kind: unreachable (nothing ever answered), http, sha256, digest (blake2b), size,
    missing, interrupted, deadline."""

    def __init__(self, kind: str, message: str) -> None:
        super().__init__(message)
        self.kind = kind


def sha256_of(path: str) -> str:
    return digest_of(path, "sha256")


def digest_of(path: str, algo: str) -> str:
    """The file's digest as `algo` is written: sha256's hex, or blake2b's (filecoin-proofs':
    the first 16 bytes of the blake2b-512 sum, as hex)."""
    h = hashlib.blake2b() if algo == "blake2b" else hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(CHUNK), b""):
            h.update(chunk)
    return h.hexdigest()[:32] if algo == "blake2b" else h.hexdigest()


def parse_digest(text: str) -> tuple[str | None, str]:
    """(algorithm, hex) of a DIGEST argument; (None, "") for `-`."""
    algo, _, value = text.rpartition(":")
    if text in ("", "-"):
        return None, ""
    if algo in ("", "sha256") and len(value) == 64:
        return "sha256", value.lower()
    if algo == "blake2b" and len(value) == 32:
        return "blake2b", value.lower()
    raise ValueError(f"not a digest: {text[:80]!r}")


def _size(path: str) -> int:
    try:
        return os.path.getsize(path)
    except OSError:
        return 0


def _open(url: str, offset: int, timeout: float) -> Any:
    import urllib.error
    import urllib.request

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

    def announce(self, name: str, total: int) -> None:
        """A file's size, learnt from the server: {"total": {"file": NAME, "bytes": N}}."""
        if self.interval > 0:
            self.out.write(json.dumps({"total": {"file": name, "bytes": total}}) + "\n")
            self.out.flush()


def _no_report(_done: int) -> None:
    pass


def probe(url: str, timeout: float) -> None:
    """Raise FetchFailed("unreachable") unless the URL's server accepts a TCP connection
    within `timeout` seconds. Skipped where a proxy would carry the request."""
    import socket
    import urllib.parse
    import urllib.request

    parts = urllib.parse.urlsplit(url)
    if parts.scheme not in ("http", "https") or urllib.request.getproxies().get(parts.scheme):
        return
    port = parts.port or (443 if parts.scheme == "https" else 80)
    try:
        socket.create_connection((parts.hostname or "", port), timeout=timeout).close()
    except OSError as e:
        raise FetchFailed("unreachable", f"{parts.hostname}:{port} did not accept a "
                          f"connection within {timeout:g} s: {in_words(e)}") from e


def in_words(error: BaseException) -> str:
    """What went wrong with a connection, in words (as the controller says it,
    rollout.failures): "connection refused", "timed out", "no such host", "no route to
    host", "connection reset", "HTTP N"; else the OS's words, never "[Errno N] ..."."""
    import socket

    code = getattr(error, "code", None)
    if isinstance(code, int) and hasattr(error, "headers"):  # urllib's HTTPError
        return f"HTTP {code}"
    cause = getattr(error, "reason", None)  # urllib's URLError wraps the OS error
    error = cause if isinstance(cause, BaseException) else error
    if isinstance(error, socket.gaierror):
        return "no such host"
    if isinstance(error, ConnectionRefusedError):
        return "connection refused"
    if isinstance(error, (TimeoutError, socket.timeout)):
        return "timed out"
    if isinstance(error, (ConnectionResetError, BrokenPipeError)):
        return "connection reset"
    if isinstance(error, OSError) and error.errno in (errno.EHOSTUNREACH, errno.ENETUNREACH):
        return "no route to host"
    if isinstance(error, OSError) and error.strerror:
        return error.strerror.lower()
    if isinstance(cause, str) and cause:
        return cause[:200]
    return type(error).__name__


def tether(fd: int) -> None:
    """Exit the whole process once the file `fd` (stdin) ends: the controller closed it or
    went away. Read with os.read, never through sys.stdin's buffer: a daemon thread blocked
    in the buffer's read holds its lock, and the interpreter's own exit, which closes that
    buffer, then waited a second for the lock and aborted (SIGABRT) after every download."""
    import threading

    def watch() -> None:
        with contextlib.suppress(OSError):
            while os.read(fd, 4096):
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


def problem(path: str, digest: str, size: int | None) -> tuple[str, str] | None:
    """Why the file at `path` is not the one expected: (kind, both figures), kind "size",
    "sha256" or "digest" (blake2b); None when it is."""
    algo, want = parse_digest(digest)
    found = _size(path)
    if size is not None and found != size:
        return "size", f"{found} bytes, expected {size}"
    if not found:
        return "size", "0 bytes, expected a non-empty file"
    if algo is None:
        return None
    have = digest_of(path, algo)
    if have == want:
        return None
    return ("sha256" if algo == "sha256" else "digest"), f"{algo} {have}, expected {want}"


def _checked(path: str, digest: str, size: int | None) -> bool:
    return problem(path, digest, size) is None


def learn_size(url: str, timeout: float) -> int | None:
    """The size a server gives for `url` (HEAD, Content-Length); None when it gives none."""
    import http.client
    import urllib.request

    request = urllib.request.Request(url, method="HEAD",
                                     headers={"User-Agent": "rollout-fetch/1"})
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            length = response.headers.get("Content-Length", "")
    except (OSError, http.client.HTTPException):
        return None
    return int(length) if length.isdigit() and int(length) > 0 else None


UNKNOWN = 1 << 62  # "read to the end": a size no download reaches


def fetch_file(
    url: str,
    path: str,
    digest: str,
    size: int | None,
    retries: int = 4,
    timeout: float = 30.0,
    sleep: Callable[[float], None] = time.sleep,
    report: Report = _no_report,
    deadline: float | None = None,
) -> dict[str, Any]:
    """Bring `path` to the file at `url` with this digest (see parse_digest) and size (None:
    the server's, else read to its end); what it took, as data. `deadline`: a
    time.monotonic() value the whole download must end by (FetchFailed)."""
    out: dict[str, Any] = {"answered": False}
    if os.path.exists(path) and _checked(path, digest, size):
        return {**out, "outcome": "present", "received": 0}
    import http.client
    if size is None:
        size = learn_size(url, read_timeout(timeout, deadline))
        if size is None and os.path.exists(path):  # no size to resume against
            os.unlink(path)
    want = UNKNOWN if size is None else size
    if _size(path) >= want and os.path.exists(path):  # whole, yet not this file: stale
        os.unlink(path)
    fresh_start_left = 1
    for attempt in range(retries + 1):
        try:
            _attempt(url, path, want, timeout, out, report, deadline)
        except FetchFailed as e:
            if e.kind == "deadline":
                raise
            if e.kind != "retry" or attempt == retries:
                raise FetchFailed("http", str(e)) from e
        except (OSError, http.client.HTTPException) as e:  # timeouts are OSErrors
            if size is None:
                with contextlib.suppress(OSError):
                    os.unlink(path)  # no size to resume against: from the start
            if attempt == retries:
                kind = "interrupted" if out["answered"] else "unreachable"
                raise FetchFailed(kind, f"{url}: {in_words(e)}") from e
        else:
            if _size(path) >= want or size is None:
                wrong = problem(path, digest, size)
                if wrong is None:
                    return {**out, "outcome": "downloaded"}
                os.unlink(path)
                if not out.get("resumed_from") or not fresh_start_left:
                    raise FetchFailed(wrong[0], f"{url}: {wrong[1]}")
                fresh_start_left -= 1  # a resumed prefix may be stale: once from scratch
                out.pop("resumed_from")
                continue
        past(deadline, url)
        sleep(min(8.0, 0.5 * 2**attempt))
    raise FetchFailed("interrupted", f"{url}: still incomplete after {retries + 1} attempts")


class Verified:
    """What was hashed: DIR/.verified.json, the real path of each file checked with its
    size, inode and modification time, and the digest it had. A file whose stat is
    unchanged is not hashed again (47 GiB take minutes)."""

    def __init__(self, folder: str) -> None:
        self.path = os.path.join(folder, ".verified.json")
        try:
            with open(self.path, encoding="utf-8") as f:
                data = json.load(f)
        except (OSError, ValueError):
            data = {}
        self.seen: dict[str, Any] = data if isinstance(data, dict) else {}

    @staticmethod
    def _key(path: str) -> list[int]:
        st = os.stat(path)
        return [st.st_size, st.st_ino, st.st_dev, st.st_mtime_ns]

    def problem(self, path: str, digest: str, size: int | None) -> tuple[str, str] | None:
        real = os.path.realpath(path)
        if self.seen.get(real) == [digest, *self._key(real)]:
            return None
        wrong = problem(real, digest, size)
        if wrong is None and parse_digest(digest)[0] is not None:
            self.seen[real] = [digest, *self._key(real)]
            with contextlib.suppress(OSError):
                safe_write(self.path, json.dumps(self.seen).encode(), 0o644)
        return wrong


def reuse_folders(folders: list[str]) -> list[str]:
    """The --reuse folders, then the host's FIL_PROOFS_PARAMETER_CACHE (filecoin-proofs' and
    curio's setting), each once."""
    env = os.environ.get("FIL_PROOFS_PARAMETER_CACHE", "")
    found = [*folders, *([env] if env.startswith("/") else [])]
    return list(dict.fromkeys(f.rstrip("/") or "/" for f in found))


def link_into(folder: str, name: str, target: str) -> None:
    """DIR/NAME becomes a link to `target` (replacing what was there, atomically)."""
    tmp = os.path.join(folder, f".{name}.link")
    with contextlib.suppress(FileNotFoundError):
        os.unlink(tmp)
    os.symlink(target, tmp)
    os.replace(tmp, os.path.join(folder, name))


def refused(path: str, wrong: tuple[str, str]) -> FetchFailed:
    return FetchFailed(wrong[0], f"{path}: {wrong[1]}; refused (remove it to fetch it again)")


def ensure_param(name: str, url: str, digest: str, size: int | None, folder: str,
                 reuse: list[str], verified: Verified,
                 before_download: Callable[[], None] = lambda: None,
                 announce: Report = _no_report, **fetch: Any) -> dict[str, Any]:
    """One proof parameter file in `folder`: checked where it is, linked from a reuse
    folder, or downloaded through NAME.partial (URL "-": pushed there by the controller);
    `before_download` runs only when a download is needed (the gateway's connect probe),
    `announce` gets the size the server gives where the manifest has none."""
    path = os.path.join(folder, name)
    if os.path.exists(path):
        wrong = verified.problem(path, digest, size)
        if wrong is not None:
            raise refused(os.path.realpath(path), wrong)
        return {"outcome": "present", "path": os.path.realpath(path), "received": 0}
    for other in reuse_folders(reuse):
        there = os.path.join(other, name)
        if os.path.isfile(there) and os.path.realpath(there) != os.path.realpath(path):
            wrong = verified.problem(there, digest, size)
            if wrong is not None:
                raise refused(there, wrong)
            link_into(folder, name, os.path.realpath(there))
            return {"outcome": "reused", "path": os.path.realpath(there), "received": 0}
    partial = path + ".partial"
    if url == "-":
        if not os.path.exists(partial):
            raise FetchFailed("missing", f"{path}: missing, and no URL to download it from")
        wrong = problem(partial, digest, size)
        if wrong is not None:
            os.unlink(partial)
            raise FetchFailed(wrong[0], f"{partial} (pushed): {wrong[1]}")
        out = {"outcome": "pushed", "received": 0}
    else:
        before_download()
        if size is None:
            size = learn_size(url, float(fetch.get("timeout", 30.0)))
            if size is not None:
                announce(size)
        out = fetch_file(url, partial, digest, size, **fetch)
    os.replace(partial, path)
    verified.problem(path, digest, size)  # remembered: not hashed again next time
    return {**out, "path": path}


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--dir", required=True)
    p.add_argument("--file", nargs=4, action="append", default=[],
                   metavar=("NAME", "URL", "DIGEST", "SIZE"))
    p.add_argument("--retries", type=int, default=4)
    p.add_argument("--timeout", type=float, default=30.0)
    p.add_argument("--connect-timeout", type=float, default=0.0)
    p.add_argument("--progress", type=float, default=0.0)
    p.add_argument("--deadline", type=float, default=0.0, help="seconds for it all (0: none)")
    p.add_argument("--tether", action="store_true")
    p.add_argument("--partial", action="store_true", help="proof parameters (see above)")
    p.add_argument("--reuse", action="append", default=[], help="a folder to use files from")
    args = p.parse_args(argv)
    if args.tether:
        tether(sys.stdin.fileno())
    if not os.path.isdir(args.dir):
        safe_mkdir(args.dir)
    files: dict[str, Any] = {}
    reporter = Reporter(args.progress)
    probed: set[str] = set()
    deadline = time.monotonic() + args.deadline if args.deadline > 0 else None
    verified = Verified(args.dir)
    for name, url, digest, size_text in args.file:
        size = None if size_text == "-" else int(size_text)
        fetch = {"retries": args.retries, "timeout": args.timeout,
                 "report": reporter.for_file(name), "deadline": deadline}
        try:
            if args.partial:
                files[name] = ensure_param(
                    name, url, digest, size, args.dir, args.reuse, verified,
                    functools.partial(_probe_once, url, args.connect_timeout, probed),
                    functools.partial(reporter.announce, name), **fetch)
            else:
                _probe_once(url, args.connect_timeout, probed)
                files[name] = fetch_file(url, os.path.join(args.dir, name), digest, size,
                                         **fetch)
            if files[name]["outcome"] not in ("present", "reused") or not args.partial:
                reporter.report(name, _size(os.path.join(args.dir, name)), force=True)
        except FetchFailed as e:
            print(json.dumps({"files": files, "error": {"kind": e.kind, "file": name,
                                                        "message": str(e)}}))
            return 3 if e.kind == "unreachable" and not files else 1
    print(json.dumps({"files": files, "error": None}))
    return 0


def _probe_once(url: str, timeout: float, probed: set[str]) -> None:
    import urllib.parse

    server = urllib.parse.urlsplit(url).netloc
    if timeout > 0 and server not in probed:
        probe(url, timeout)
        probed.add(server)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
