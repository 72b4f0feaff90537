"""Print one JSON object of facts about this host, read fresh. Never fails as a whole.

Run on the host by the controller:  python3 - --root /data < facts.py

A piece that cannot be read becomes null (and its error is listed under "errors").
Big files (exits.jsonl) are only read from their end, a bounded number of bytes.
The rule is actions/facts.py's (ops.facts); this script is its argv wrapper.
Standard library only; runs on python3 >= 3.9.
"""

from __future__ import annotations

import argparse
import json
import sys

# ruff: noqa: E501, F401
# isort: off
from rollout.host.scripts.actions.facts import Facts, FactsArgs, cgroup, collect, cuzk_loops, in_ssh_session, runs_cuzk_in_a_loop, script_of, sha256_of, tail_lines  # inlined on hosts
# isort: on


def parse_args(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(description="host facts as one JSON object")
    p.add_argument("--root", default="/data")
    p.add_argument("--cgroup-root", default="/sys/fs/cgroup")
    p.add_argument("--proc", default="/proc")
    p.add_argument("--port", type=int, action="append", metavar="N",
                   help="also report who holds this TCP port (repeatable)")
    p.add_argument("--digest", action="append", metavar="PATH",
                   help="also report this file's sha256 (repeatable)")
    return p.parse_args(argv)


def main(argv: list[str]) -> int:
    args = parse_args(argv)
    out = collect(FactsArgs(args.root, args.digest, args.port, args.proc, args.cgroup_root))
    print(json.dumps(out, sort_keys=True, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
