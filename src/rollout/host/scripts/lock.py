"""The host's deploy lock, <root>/rollout/lock: one rollout at a time on this host.

Run on the host by the controller:

    python3 - --root /data ACTION --holder JSON [--expect SHA256] < lock.py

ACTION is take, refresh, release or break. The lock lives on the host (as Kamal keeps its
deploy lock on the servers), so a second controller is refused whatever checkout or
inventory it runs from. Every change happens under an flock on <root>/rollout/lock.guard,
and the lock file is only ever replaced whole (a temporary file, fsynced, then linked or
renamed into place): nobody reads half a lock.

The holder's JSON gets a "heartbeat" (this host's clock) each time it is written; `refresh`
rewrites it, and the lock's age is the time since that write, measured on this host, so
the controller's clock never matters. A lock dated ahead of this host's clock (skew, or a
forged mtime) has no age to measure: its "ahead" (seconds) says so, and the controller
counts it stale (engine/locks.py), so that --break-lock always breaks it.

Prints one JSON object: {"ok": true, ...} when ACTION was done; {"ok": false, "lock":
{"text", "sha256", "age", "ahead"}} when another holder's lock (its text as found,
unparsed) stands in the way. `break` removes the lock only when its sha256 is still --expect.
The rule is actions/lock.py's (ops.lock, the call the controller makes); this
script is its argv wrapper. Standard library only; runs on python3 >= 3.9.
"""

from __future__ import annotations

import argparse
import json
import sys

# ruff: noqa: E501, F401
# isort: off
from rollout.host.scripts.actions.lock import act, found, host_id, identify, lock  # inlined on hosts
# isort: on


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(description="the host's deploy lock")
    p.add_argument("--root", default="/data")
    p.add_argument("action", choices=("take", "refresh", "release", "break"))
    p.add_argument("--holder", required=True, help="the holder's JSON object")
    p.add_argument("--expect", help="break: the sha256 of the lock judged breakable")
    args = p.parse_args(argv)
    print(json.dumps(lock(args.root, args.action, json.loads(args.holder), args.expect),
                     sort_keys=True))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
