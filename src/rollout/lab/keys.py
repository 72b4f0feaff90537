"""SSH key material of the lab: one client key pair, one fresh host key per host."""

from __future__ import annotations

import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

from rollout.errors import EnvironmentProblem

CLIENT_KEY = Path("keys") / "id_ed25519"


@dataclass(frozen=True)
class HostKey:
    private: bytes
    public: str  # "ssh-ed25519 AAAA..."


def _keygen(path: Path, comment: str) -> None:
    argv = ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", comment, "-f", str(path)]
    try:
        subprocess.run(argv, check=True, capture_output=True)
    except FileNotFoundError as exc:
        raise EnvironmentProblem("ssh-keygen is not installed (openssh-client)") from exc
    except subprocess.CalledProcessError as exc:
        raise EnvironmentProblem(f"ssh-keygen failed: {exc.stderr.decode().strip()}") from exc


def ensure_client_key(lab: Path) -> Path:
    """The key pair the lab's root logins accept, created once under `lab`."""
    key = lab / CLIENT_KEY
    if not (key.is_file() and key.with_suffix(".pub").is_file()):
        key.parent.mkdir(parents=True, exist_ok=True)
        key.unlink(missing_ok=True)
        key.with_suffix(".pub").unlink(missing_ok=True)
        _keygen(key, "rollout-lab")
    return key


def new_host_key(name: str) -> HostKey:
    """A fresh ed25519 host key: recreated hosts get new keys, as on a rented fleet."""
    with tempfile.TemporaryDirectory(prefix="rollout-lab-hostkey-") as tmp:
        path = Path(tmp) / "ssh_host_ed25519_key"
        _keygen(path, f"root@{name}")
        public = path.with_suffix(".pub").read_text().split()
        return HostKey(path.read_bytes(), f"{public[0]} {public[1]}")


def known_hosts_line(address: str, port: int, key: HostKey) -> str:
    host = address if port == 22 else f"[{address}]:{port}"
    return f"{host} {key.public}"
