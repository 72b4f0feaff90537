"""Print who holds the daemon's TCP ports, as one JSON object: the owner pids of each port
(from /proc/net/tcp and tcp6 listening sockets matched to /proc/PID/fd) and, for --pid, that
process's age, so the controller can prove whose answer it got.

Run on the host by the controller:  python3 - --port 9821 [--port 9820] [--pid N] < ports.py

The wait for the daemon's ports is ops.py's wait_ready (the host API).
Standard library only; runs on python3 >= 3.9.
"""

from __future__ import annotations

import argparse
import json
import sys

# script_text() replaces the next line with common.py: it stays one line
# ruff: noqa: E501
# isort: off
from rollout.host.scripts.common import ports_owners, process_brief, proc_stat  # inlined on hosts
# isort: on

MARK = "@@rollout: owners of the ports follow@@"  # after a command run first (then_ports)


def collect(proc: str, ports: list[int], pid: int | None) -> dict[str, object]:
    owners = ports_owners(proc, ports)
    out: dict[str, object] = {"ports": {str(p): owners[p] for p in ports}}
    if pid is not None:
        out["pid"] = process_brief(proc, pid) if proc_stat(proc, pid) else None
    return out


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(description="owners of TCP listening ports")
    p.add_argument("--port", type=int, action="append", default=[])
    p.add_argument("--pid", type=int)
    p.add_argument("--proc", default="/proc")
    args = p.parse_args(argv)
    print(json.dumps(collect(args.proc, args.port, args.pid), sort_keys=True))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
