"""A garbage line in the inventory's known_hosts (issue 18): skipped with a warning naming the
file and line, as OpenSSH does; the good lines still count; never a crash (exit 70)."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import paramiko
import pytest

from rollout.errors import HostKeyError
from rollout.transport.known_hosts import load_known_hosts
from rollout.transport.ssh import SshTransport

GOOD_KEY = "AAAAC3NzaC1lZDI1NTE5AAAAIOdNvJHzMUzz0RJvYEtMH1YAdGKxyCixl2Mb2K3hyUmg"
GARBAGE = [
    b"\xff\xfe not utf-8 \x80",
    b"[127.0.0.1]:2222 ssh-ed25519 !!!notbase64!!!",
    b"host ssh-rsa AAAAB3NzaC1yc2EAAAADAQABAAAAgQ==",  # decodes, but no RSA key
    b"host ssh-ed25519 AAAA\x00AAA",
    b"@cert-authority * ssh-ed25519 " + GOOD_KEY.encode(),
]


def write(tmp_path: Path, *lines: bytes) -> Path:
    path = tmp_path / "known_hosts"
    path.write_bytes(b"\n".join(lines) + b"\n")
    return path


def test_garbage_lines_are_skipped_with_file_and_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    good = f"[127.0.0.1]:2201 ssh-ed25519 {GOOD_KEY}".encode()
    path = write(tmp_path, b"# a comment", *GARBAGE, good)
    keys = paramiko.HostKeys()
    warnings = load_known_hosts(keys, path)
    assert [w.split(": not")[0] for w in warnings] == [f"{path}:{n}" for n in range(2, 7)]
    assert keys.lookup("[127.0.0.1]:2201") is not None
    err = capsys.readouterr().err
    assert f"{path}:3: not a host key line" in err and "notbase64" not in err
    load_known_hosts(paramiko.HostKeys(), path)
    assert capsys.readouterr().err == ""  # told once


def test_a_revoked_line_is_an_error(tmp_path: Path) -> None:
    path = write(tmp_path, f"@revoked * ssh-ed25519 {GOOD_KEY}".encode())
    with pytest.raises(HostKeyError, match=r"known_hosts:1: @revoked"):
        load_known_hosts(paramiko.HostKeys(), path)


@pytest.mark.parametrize("line", GARBAGE)
def test_the_transport_takes_a_known_hosts_with_garbage(tmp_path: Path, line: bytes) -> None:
    target = SimpleNamespace(name="h", address="127.0.0.1", port=2201, user="root",
                             key_file=None, known_hosts=write(tmp_path, line),
                             host_key_policy="strict", connect_timeout=5, proxy_jump=())
    SshTransport(target)._unopened()  # loads the file: no exception
