"""fetch.py checking params already on the host (each rollout's preflight, on every host, in
the host's agent) loads no network module: the imports cost a host more than the check."""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
from pathlib import Path

from rollout.host.scripts import script_text

DATA = b"params " * 1000
B2 = hashlib.blake2b(DATA).hexdigest()[:32]

# Runs the script as the agent's fork does (not as __main__: main is called here), then
# says which network modules it loaded.
DRIVER = """
import json, sys
ns = {"__name__": "fetch"}
exec(compile(sys.stdin.read(), "<fetch>", "exec"), ns)
code = ns["main"](sys.argv[1:])
net = ("urllib.request", "http.client", "socket", "threading")
print(json.dumps({"code": code, "loaded": [m for m in net if m in sys.modules]}))
"""


def _run(tmp_path: Path, url: str) -> dict[str, object]:
    args = [sys.executable, "-c", DRIVER, "--dir", str(tmp_path / "cache"), "--partial",
            "--retries", "0", "--connect-timeout", "0.2",
            "--file", "p.params", url, f"blake2b:{B2}", str(len(DATA))]
    p = subprocess.run(args, input=script_text("fetch"), capture_output=True, text=True,
                       env={"PATH": "/usr/bin:/bin"}, check=False)
    result: dict[str, object] = json.loads(p.stdout.strip().splitlines()[-1])
    return result


def test_a_check_of_params_already_there_imports_no_network_module(tmp_path: Path) -> None:
    (tmp_path / "cache").mkdir()
    (tmp_path / "cache" / "p.params").write_bytes(DATA)
    assert _run(tmp_path, "http://127.0.0.1:9/x") == {"code": 0, "loaded": []}


def test_a_missing_param_still_reaches_for_the_network(tmp_path: Path) -> None:
    out = _run(tmp_path, "http://127.0.0.1:9/x")  # nothing listens on port 9
    assert out["code"] != 0 and "socket" in out["loaded"]  # type: ignore[operator]
