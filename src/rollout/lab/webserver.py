"""The lab's bundle server: a plain HTTP file server that runs in a container on the lab's
network, standard library only. GET and HEAD with single byte ranges, PUT (for `rollout
publish`), one JSON line per request in the log (method, path, range, status, bytes).

A hold, for tests that cut a download midway: while the file HOLD holds a number N, every
GET stops after sending N bytes of its body and waits until HOLD is removed, then goes on.
A throttle, for tests that watch a download's progress: while the file RATE holds a number
N, every GET sends its body at about N bytes a second.
Run: python3 webserver.py --root DIR --log FILE --hold FILE [--rate FILE] --port 8080
"""

from __future__ import annotations

import argparse
import json
import os
import posixpath
import re
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

RANGE = re.compile(r"^bytes=(\d+)-(\d*)$")
CHUNK = 1 << 20


class Handler(BaseHTTPRequestHandler):
    server_version = "rollout-lab-web/1"
    opts: Any = None
    log_lock = threading.Lock()

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the base's name
        pass

    def _record(self, status: int, sent: int = 0) -> None:
        entry = {"method": self.command, "path": self.path, "range": self.headers.get("Range"),
                 "status": status, "bytes": sent, "client": self.client_address[0]}
        with self.log_lock, open(self.opts.log, "a") as f:
            f.write(json.dumps(entry) + "\n")

    def _local(self) -> str | None:
        path = posixpath.normpath(self.path.split("?", 1)[0])
        if not path.startswith("/") or ".." in path.split("/"):
            return None
        return os.path.join(self.opts.root, path.lstrip("/"))

    def do_HEAD(self) -> None:
        self._get(body=False)

    def do_GET(self) -> None:
        self._get(body=True)

    def _get(self, body: bool) -> None:
        local = self._local()
        if local is None or not os.path.isfile(local):
            self.send_error(404)
            return self._record(404)
        size = os.path.getsize(local)
        start, end, status = 0, size - 1, 200
        match = RANGE.match(self.headers.get("Range") or "")
        if match:
            start = int(match.group(1))
            end = min(int(match.group(2)), size - 1) if match.group(2) else size - 1
            if start >= size:
                self.send_response(416)
                self.send_header("Content-Range", f"bytes */{size}")
                self.end_headers()
                return self._record(416)
            status = 206
        self.send_response(status)
        self.send_header("Content-Length", str(end - start + 1))
        self.send_header("Accept-Ranges", "bytes")
        if status == 206:
            self.send_header("Content-Range", f"bytes {start}-{end}/{size}")
        self.end_headers()
        sent = self._send(local, start, end - start + 1) if body else 0
        self._record(status, sent)

    def _send(self, local: str, start: int, length: int) -> int:
        sent, began = 0, time.monotonic()
        with open(local, "rb") as f:
            f.seek(start)
            while sent < length:
                self._wait_for_hold(sent)
                rate = self._rate()
                if rate:  # a tenth of a second's worth, once its time has come
                    time.sleep(max(0.0, began + sent / rate - time.monotonic()))
                room = max(1, rate // 10) if rate else CHUNK
                chunk = f.read(min(CHUNK, length - sent, self._room(sent), room))
                if not chunk:
                    break
                try:
                    self.wfile.write(chunk)
                    self.wfile.flush()
                except OSError:
                    break
                sent += len(chunk)
        return sent

    def _hold_at(self) -> int | None:
        try:
            with open(self.opts.hold) as f:
                return int(f.read().strip() or 0)
        except (OSError, ValueError):
            return None

    def _rate(self) -> int:
        path = getattr(self.opts, "rate", None)
        try:
            with open(path or "") as f:
                return max(0, int(f.read().strip() or 0))
        except (OSError, ValueError):
            return 0

    def _room(self, sent: int) -> int:
        at = self._hold_at()
        return CHUNK if at is None or sent >= at else at - sent

    def _wait_for_hold(self, sent: int) -> None:
        while True:
            at = self._hold_at()
            if at is None or sent < at:
                return
            time.sleep(0.05)

    def do_PUT(self) -> None:
        local = self._local()
        length = int(self.headers.get("Content-Length") or -1)
        if local is None or length < 0:
            self.send_error(400)
            return self._record(400)
        os.makedirs(os.path.dirname(local), exist_ok=True)
        tmp = local + ".partial"
        with open(tmp, "wb") as f:
            left = length
            while left:
                chunk = self.rfile.read(min(CHUNK, left))
                if not chunk:
                    break
                f.write(chunk)
                left -= len(chunk)
        if left:
            os.unlink(tmp)
            self.send_error(400)
            return self._record(400)
        os.replace(tmp, local)
        self.send_response(201)
        self.send_header("Content-Length", "0")
        self.end_headers()
        self._record(201, length)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--root", required=True)
    p.add_argument("--log", required=True)
    p.add_argument("--hold", required=True)
    p.add_argument("--rate", default="")
    p.add_argument("--port", type=int, default=8080)
    p.add_argument("--bind", default="0.0.0.0")
    Handler.opts = p.parse_args()
    os.makedirs(Handler.opts.root, exist_ok=True)
    ThreadingHTTPServer((Handler.opts.bind, Handler.opts.port), Handler).serve_forever()


if __name__ == "__main__":
    main()
