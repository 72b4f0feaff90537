"""Files the controller writes on a host, written without following a link; and the check,
before root acts there, that nothing under the root is a planted link or open to others.

Run on the host by the controller:

    python3 -c BOOTSTRAP write PATH [--keep KEPT] [--if-changed]   (the text on stdin)
    python3 - copy SRC DST < files.py
    python3 - check --root /data [--path P ...] < files.py

`write` replaces PATH whole with stdin (0600); `--keep`: the file it replaces is kept there
first; `--if-changed`: nothing is written when PATH already holds the text. `copy` puts a
kept file back. `check` lists every problem found: a root, rollout/ or releases/ folder not
owned by root or writable by group or others; a supervisor.py likewise; any symbolic link
under rollout/ or in releases/; a PATH (or its folder) that is a link; a `current` that does
not point into releases/. Prints one JSON object: {"ok": true, ...} or {"ok": false,
"refused": REASON} / {"problems": [...]}. The rules are actions/files.py's (ops.write_file, ops.copy_file, ops.check_root); this
script is their argv wrapper. Standard library only; runs on python3 >= 3.9.
"""

from __future__ import annotations

import argparse
import json
import sys

# ruff: noqa: E501, F401
# isort: off
from rollout.host.scripts.common import UnsafePath  # inlined on hosts
from rollout.host.scripts.actions.files import check, copy, current_problem, links_under, private, read_nofollow, write  # inlined on hosts
# isort: on


def parse_args(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(description="files written without following a link")
    sub = p.add_subparsers(dest="action", required=True)
    w = sub.add_parser("write", help="replace PATH with stdin")
    w.add_argument("path")
    w.add_argument("--keep", help="keep the file replaced here first")
    w.add_argument("--if-changed", action="store_true")
    c = sub.add_parser("copy", help="put SRC's bytes in DST")
    c.add_argument("src")
    c.add_argument("dst")
    k = sub.add_parser("check", help="what root must not act on under --root")
    k.add_argument("--root", default="/data")
    k.add_argument("--path", action="append", default=[], help="also a file rollout writes")
    return p.parse_args(argv)


def main(argv: list[str]) -> int:
    args = parse_args(argv)
    try:
        if args.action == "write":
            out = write(args.path, sys.stdin.buffer.read(), args.keep, args.if_changed)
        elif args.action == "copy":
            out = copy(args.src, args.dst)
        else:
            problems = check(args.root, args.path)
            out = {"ok": not problems, "problems": problems}
    except UnsafePath as e:
        out = {"ok": False, "refused": str(e)}
    except OSError as e:
        out = {"ok": False, "refused": f"{e.filename or ''}: {e.strerror}"}
    print(json.dumps(out, sort_keys=True))
    return 0 if out["ok"] else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
