"""The floor: per host one scp of the release's files and one ssh running floor.sh, the canary
host first and then the rest at once, as the default playbook batches them."""

from __future__ import annotations

import functools
import json
import os
import shlex
import shutil
import subprocess
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

from rollout.bundle.release import Release
from rollout.errors import StepFailed

ROOT = "/data"
STATUS_URL = "http://127.0.0.1:9821/status"
VALIDATE_ADDR = "http://127.0.0.1:9820"
C1 = "/data/32gbench/c1.json"


@dataclass(frozen=True)
class SshHost:
    name: str
    port: int
    key: Path
    known_hosts: Path
    address: str = "127.0.0.1"

    def options(self) -> list[str]:
        return ["-i", str(self.key), "-o", "BatchMode=yes", "-o", "IdentitiesOnly=yes",
                "-o", f"UserKnownHostsFile={self.known_hosts}",
                "-o", "StrictHostKeyChecking=yes", "-o", "LogLevel=ERROR"]  # fmt: skip


def floor_script() -> str:
    return resources.files("rollout").joinpath("resources/bench/floor.sh").read_text()


def staged(release: Release, work: Path) -> Path:
    """A local folder `.floor-<id>` holding the release's files and its RELEASE.json (as
    rollout writes it on the host), for one `scp -r`."""
    folder = work / f".floor-{release.id}"
    folder.mkdir(parents=True, exist_ok=True)
    for artifact in release.artifacts:
        target = folder / artifact.name
        if not target.exists():
            try:
                os.link(artifact.local_path, target)
            except OSError:
                shutil.copyfile(artifact.local_path, target)
    (folder / "RELEASE.json").write_text(json.dumps(release.to_dict(), indent=2))
    return folder


@functools.cache
def lab_work() -> tuple[str, str, str]:
    """The lab playbook's cordon and uncordon commands and its work.cordon_takes, which
    rollout runs and waits around each host's stop: the floor does too (the same steps, the
    user's own commands and the cordon's window costing both sides alike)."""
    from rollout.config.playbook import LAB_PLAYBOOK, parse_set_options
    from rollout.steps.kinds import load_playbook

    work = load_playbook(LAB_PLAYBOOK, overrides=parse_set_options(())).work
    return str(work.cordon or ""), str(work.uncordon or ""), f"{float(work.cordon_takes):g}"


def _run(argv: list[str], stdin: str | None, what: str) -> str:
    r = subprocess.run(argv, input=stdin, capture_output=True, text=True, check=False)
    if r.returncode != 0:
        raise StepFailed(f"floor {what} exited {r.returncode}: {(r.stderr or r.stdout)[-800:]}")
    return r.stdout


def floor_host(host: SshHost, release: Release, folder: Path) -> str:
    """One scp, one ssh; the last line floor.sh printed ("floor: validated <id>")."""
    dest = f"root@{host.address}:{ROOT}/releases/{folder.name}"
    _run(["scp", "-q", "-r", "-P", str(host.port), *host.options(), str(folder), dest],
         None, f"scp to {host.name}")  # fmt: skip
    sums = "".join(f"{a.sha256}  {a.name}\n" for a in release.artifacts)
    args = [ROOT, release.id, STATUS_URL, VALIDATE_ADDR, C1, sums, *lab_work()]
    remote = "sh -s -- " + " ".join(shlex.quote(a) for a in args)
    out = _run(["ssh", "-p", str(host.port), *host.options(), f"root@{host.address}", remote],
               floor_script(), f"ssh on {host.name}")  # fmt: skip
    return out.strip().splitlines()[-1] if out.strip() else ""


def run_floor(hosts: list[SshHost], release: Release, work: Path) -> float:
    """Seconds for the floor over `hosts`: the first alone (the canary), then the rest."""
    folder = staged(release, work)
    started = time.monotonic()
    floor_host(hosts[0], release, folder)
    if hosts[1:]:
        with ThreadPoolExecutor(max_workers=len(hosts) - 1) as pool:
            list(pool.map(lambda h: floor_host(h, release, folder), hosts[1:]))
    return time.monotonic() - started
