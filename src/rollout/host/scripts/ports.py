"""Print who holds the daemon's TCP ports, as one JSON object: the owner pids of each port
(from /proc/net/tcp and tcp6 listening sockets matched to /proc/PID/fd) and, for --pid, that
process's age, so the controller can prove whose answer it got.

Run on the host by the controller:  python3 - --port 9821 [--port 9820] [--pid N] < ports.py

With --wait SECONDS it first waits, polling every 50 ms in this one process, until the
gRPC port (--grpc-url) accepts a connection and then the status port (--status-url)
answers, and prints that answer, then MARK's line, then the owners; cuzk binds the status
port before the gRPC one. Exit 3 ("daemon PID died during start-up") once the daemon
(--watch, else the pid --pidfile names) is gone; exit 1 when nothing answered in time.
Standard library only; runs on python3 >= 3.9.
"""

from __future__ import annotations

import argparse
import json
import socket
import sys
import time

# script_text() replaces the next line with common.py: it stays one line
# ruff: noqa: E501
# isort: off
from rollout.host.scripts.common import ports_owners, process_brief, proc_stat, proc_state, read_pidfile  # inlined on hosts
# isort: on


def collect(proc: str, ports: list[int], pid: int | None) -> dict[str, object]:
    owners = ports_owners(proc, ports)
    out: dict[str, object] = {"ports": {str(p): owners[p] for p in ports}}
    if pid is not None:
        out["pid"] = process_brief(proc, pid) if proc_stat(proc, pid) else None
    return out


POLL = 0.05  # seconds between looks
MARK = "@@rollout: owners of the ports follow@@"


def accepts(host: str, port: int) -> bool:
    """The port takes a TCP connection (as curl's exit is neither 7, refused, nor 28)."""
    try:
        with socket.create_connection((host, port), timeout=1):
            return True
    except OSError:
        return False


def status_answer(url: str) -> str | None:
    """The status port's answer (HTTP below 400, as curl -f takes it), else None."""
    import http.client  # here: only the wait needs it
    from urllib.parse import urlsplit

    parts = urlsplit(url)
    conn = http.client.HTTPConnection(parts.hostname or "127.0.0.1", parts.port or 80, timeout=1)
    try:
        conn.request("GET", parts.path or "/")
        reply = conn.getresponse()
        body = reply.read(1 << 20).decode("utf-8", "replace")
        return body if reply.status < 400 else None
    except (OSError, http.client.HTTPException):
        return None
    finally:
        conn.close()


def watched(args: argparse.Namespace) -> int | None:
    """The daemon whose death ends the wait: --watch, else the pid --pidfile names."""
    if args.watch:
        return int(args.watch)
    found = read_pidfile(args.pidfile) if args.pidfile else None
    return found[0] if found and found[0] > 0 else None


def wait_ready(args: argparse.Namespace) -> int:
    """0 once both ports answer (the answer printed), 3 if the daemon died, 1 at the end."""
    from urllib.parse import urlsplit

    grpc = urlsplit(args.grpc_url)
    pid = watched(args)
    end = time.monotonic() + args.wait
    while time.monotonic() < end:
        if accepts(grpc.hostname or "127.0.0.1", grpc.port or 80):
            answer = status_answer(args.status_url)
            if answer is not None:
                sys.stdout.write(answer)
                return 0
        if pid is not None and proc_state(args.proc, pid, None)[0] != "running":
            print(f"daemon {pid} died during start-up")
            return 3
        time.sleep(POLL)
    return 1


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(description="owners of TCP listening ports")
    p.add_argument("--port", type=int, action="append", default=[])
    p.add_argument("--pid", type=int)
    p.add_argument("--proc", default="/proc")
    p.add_argument("--wait", type=float, help="first wait this long for the ports to answer")
    p.add_argument("--grpc-url", default="")
    p.add_argument("--status-url", default="")
    p.add_argument("--watch", type=int, help="the daemon whose death ends the wait")
    p.add_argument("--pidfile", help="where to read that daemon's pid, without --watch")
    args = p.parse_args(argv)
    if args.wait is not None:
        code = wait_ready(args)
        if code:
            return code
        print(f"\n{MARK}")
    print(json.dumps(collect(args.proc, args.port, args.pid), sort_keys=True))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
