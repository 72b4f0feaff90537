"""Install the Debian packages the lab needs, the way a fresh machine gets them: apt-get."""

from __future__ import annotations

import os
import shutil
import subprocess

from rollout.errors import EnvironmentProblem


def ensure_command(command: str, package: str) -> None:
    """Install `package` with apt-get when `command` is not on PATH (root only)."""
    if shutil.which(command) is not None:
        return
    if os.geteuid() != 0:
        raise EnvironmentProblem(
            f"{command} is not installed and rollout is not root: apt-get install {package}"
        )
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    for argv in (["apt-get", "update"], ["apt-get", "install", "-y", package]):
        done = subprocess.run(argv, env=env, capture_output=True, text=True, check=False)
        if done.returncode != 0:
            tail = "\n".join(done.stderr.strip().splitlines()[-5:])
            raise EnvironmentProblem(f"installing {package} failed: {' '.join(argv)}: {tail}")
    if shutil.which(command) is None:
        raise EnvironmentProblem(f"installed {package} but {command} is still not on PATH")
