"""Install the Debian packages the lab needs, the way a fresh machine gets them: apt-get."""

from __future__ import annotations

import fcntl
import os
import shutil
import subprocess

from rollout.errors import EnvironmentProblem

APT_LOCK = "/run/lock/rollout-apt.lock"
"""Held while rollout installs a package: two processes that need one (two test workers,
the lab and a test) install one after the other, the second finding it there."""


def ensure_command(command: str, package: str) -> None:
    """Install `package` with apt-get when `command` is not on PATH (root only). Waits for
    an install under way (ours, or another apt's lock) rather than failing on its lock."""
    if shutil.which(command) is not None:
        return
    if os.geteuid() != 0:
        raise EnvironmentProblem(
            f"{command} is not installed and rollout is not root: apt-get install {package}"
        )
    with open(APT_LOCK, "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if shutil.which(command) is None:
            _install(package)
    if shutil.which(command) is None:
        raise EnvironmentProblem(f"installed {package} but {command} is still not on PATH")


def _install(package: str) -> None:
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    wait = ["-o", "DPkg::Lock::Timeout=600"]  # another apt at work: wait for it, as a person would
    for argv in (["apt-get", *wait, "update"], ["apt-get", *wait, "install", "-y", package]):
        done = subprocess.run(argv, env=env, capture_output=True, text=True, check=False)
        if done.returncode != 0:
            tail = "\n".join(done.stderr.strip().splitlines()[-5:])
            raise EnvironmentProblem(f"installing {package} failed: {' '.join(argv)}: {tail}")
