"""Run the validation proof under `timeout` and print one JSON object: its exit code, how
long it ran, its output, /status after a proof that was stopped, and whether the evidence
was written.

The evidence of an earlier validation goes first; the evidence given with --record is written
again only when the proof's stdout passes proof_verdict: exactly one result block of the
bench's own, status COMPLETED, --pattern matching inside it (stderr never counts). The
controller decides from the same output whether the proof passed, and removes the evidence
where it disagrees.

Run on the host by the controller:
  python3 - --timeout S --kill-after K --evidence PATH [--record JSON] [--pattern RE]
            [--status-url URL] -- COMMAND < prove.py
Standard library only; runs on python3 >= 3.9.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from typing import Any

from rollout.host.scripts.common import proof_verdict, safe_remove, safe_write  # inlined on hosts

STOPPED = (124, 137)  # timeout's status when it stopped the command (TERM, KILL)


def status_doc(url: str) -> dict[str, Any] | None:
    """The daemon's /status (None when it does not answer with a JSON object). Asked only
    after a proof that was stopped: urllib is imported here, not by every proof."""
    import urllib.request

    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    try:
        with opener.open(url, timeout=5) as r:
            doc = json.loads(r.read())
    except (OSError, ValueError):
        return None
    return doc if isinstance(doc, dict) else None


def remove(path: str) -> None:
    safe_remove(path)  # a link there: the link itself, never its target


def record(path: str, doc: str) -> None:
    safe_write(path, (doc + "\n").encode())  # 0600, never through a link


def prove(args: argparse.Namespace) -> dict[str, Any]:
    remove(args.evidence)
    start = time.monotonic()
    r = subprocess.run(
        ["timeout", "-k", args.kill_after, args.timeout, "sh", "-c", args.command],
        stdin=subprocess.DEVNULL, capture_output=True,
    )
    elapsed = time.monotonic() - start
    stdout = r.stdout.decode("utf-8", "replace")
    # timeout SIGKILLs itself with the command's group after --kill-after: say 137, as sh does
    code = 128 - r.returncode if r.returncode < 0 else r.returncode
    out: dict[str, Any] = {
        "exit": code, "elapsed": round(elapsed, 3), "stdout": stdout,
        "stderr": r.stderr.decode("utf-8", "replace"), "status_after": None, "recorded": False,
    }
    if code in STOPPED and args.status_url:
        out["status_after"] = status_doc(args.status_url)
    if args.record and args.pattern and proof_verdict(stdout, args.pattern)[0]:
        record(args.evidence, args.record)
        out["recorded"] = True
    return out


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(description="run the validation proof, bounded")
    p.add_argument("--timeout", required=True)
    p.add_argument("--kill-after", required=True)
    p.add_argument("--evidence", required=True)
    p.add_argument("--record", default="")
    p.add_argument("--pattern", default="")
    p.add_argument("--status-url", default="")
    p.add_argument("command")
    args = p.parse_args(argv)
    print(json.dumps(prove(args), sort_keys=True))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
