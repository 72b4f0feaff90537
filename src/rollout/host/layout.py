"""Where rollout keeps things on a host. Everything it writes lives under `root`."""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass

from rollout.errors import StepFailed

_RELEASE_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")
EXECUTABLE_NAME = r"^[A-Za-z0-9][A-Za-z0-9_.+-]{0,63}$"


def is_release_id(text: str) -> bool:
    """A release id names one folder under releases/: no `/`, no `..`, no leading `-`."""
    return _RELEASE_ID.fullmatch(text) is not None and ".." not in text


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
    def supervisor_lock(self) -> str:
        """Held (flock) by the running supervisor for its whole life."""
        return f"{self.state_dir}/supervisor.lock"

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
    def validated(self) -> str:
        """Which daemon (pid, start time) passed the validation of which release."""
        return f"{self.state_dir}/validated.json"

    @property
    def lock(self) -> str:
        return f"{self.state_dir}/lock"

    def release_dir(self, release_id: str) -> str:
        if not is_release_id(release_id):
            raise StepFailed(f"not a release id: {release_id!r}", retryable=False)
        return f"{self.releases}/{release_id}"


def q(value: object) -> str:
    """Quote one value for a remote POSIX shell. Every inventory or playbook value goes here."""
    return shlex.quote(str(value))
