"""Where rollout keeps things on a host. Everything it writes lives under `root`."""

from __future__ import annotations

import shlex
from dataclasses import dataclass


@dataclass(frozen=True)
class Layout:
    root: str = "/data"

    @property
    def releases(self) -> str:
        return f"{self.root}/releases"

    @property
    def current(self) -> str:
        return f"{self.root}/current"

    @property
    def state_dir(self) -> str:
        return f"{self.root}/rollout"

    @property
    def hold(self) -> str:
        return f"{self.state_dir}/hold"

    @property
    def daemon_pid(self) -> str:
        return f"{self.state_dir}/daemon.pid"

    @property
    def supervisor(self) -> str:
        return f"{self.state_dir}/supervisor.py"

    @property
    def supervisor_conf(self) -> str:
        return f"{self.state_dir}/supervisor.conf.json"

    @property
    def daemon_log(self) -> str:
        return f"{self.state_dir}/daemon.log"

    @property
    def previous_release(self) -> str:
        return f"{self.state_dir}/previous_release"

    @property
    def lock(self) -> str:
        return f"{self.state_dir}/lock"

    def release_dir(self, release_id: str) -> str:
        return f"{self.releases}/{release_id}"


def q(value: object) -> str:
    """Quote one value for a remote POSIX shell. Every inventory or playbook value goes here."""
    return shlex.quote(str(value))
