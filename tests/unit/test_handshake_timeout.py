"""A handshake that used the whole connect_timeout timed out, whatever paramiko raised at its
end: a paused host (sshd frozen, the port still open) leaves paramiko's start_client waiting
until its timeout, then saying "No existing session" (issue 29)."""

from __future__ import annotations

import paramiko
import pytest

from rollout.transport.failures import Dialled, connect_failure

TO = Dialled("root", "10.0.0.7", 2699, 3.0)


@pytest.mark.parametrize(("waited", "words"), [
    (3.05, "unreachable: 10.0.0.7:2699 did not finish the SSH handshake in time (fix: "),
    (0.2, "unreachable: 10.0.0.7:2699 closed the connection during the SSH handshake (fix: "),
])
def test_a_handshake_that_used_the_whole_wait_timed_out(waited: float, words: str) -> None:
    said = str(connect_failure(paramiko.SSHException("No existing session"), TO, lambda: "",
                               waited))
    assert said.startswith(words) and "No existing session" not in said, said
