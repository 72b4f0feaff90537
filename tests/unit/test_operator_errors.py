"""Errors in the operator's words (issue 29): each library exception rollout maps becomes its
kind's words and fix, never the library's text; what a server says is escaped and cut."""

from __future__ import annotations

import errno
import socket
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace

import docker
import paramiko
import pytest
import requests
from paramiko.ssh_exception import NoValidConnectionsError

from rollout.engine.hostrun import HostRun
from rollout.engine.locks import FleetLocks, Holder, LockEvents, LockPolicy
from rollout.engine.outcome import HostOutcome
from rollout.errors import (
    EnvironmentProblem,
    HostKeyError,
    RolloutError,
    StepFailed,
    TransportError,
    UserError,
)
from rollout.failures import (
    FAILURES,
    docker_failure,
    errors_markdown,
    failure,
    host_status,
    url_failure,
)
from rollout.lab import engine
from rollout.transport.failures import Dialled, connect_failure
from rollout.transport.ssh import SshTransport, _changed, _Refuse

LIBRARY_TEXT = ("Errno", "HTTPConnectionPool", "No existing session", "<class", "object at 0x",
                "Unable to connect", "Max retries")
TO = Dialled("root", "10.0.0.7", 2699, 5.0)
DOCS = Path(__file__).resolve().parents[2] / "docs" / "errors.md"


def no_library_text(message: str) -> str:
    assert not [x for x in LIBRARY_TEXT if x in message], message
    return message


def said(error: BaseException) -> str:
    return no_library_text(str(connect_failure(error, TO, lambda: "KEYS")))


def refused_on(port: int) -> NoValidConnectionsError:
    return NoValidConnectionsError({("127.0.0.1", port): ConnectionRefusedError(
        errno.ECONNREFUSED, "Connection refused")})


@pytest.mark.parametrize(("error", "words"), [
    (refused_on(2699), "unreachable: connection refused on 127.0.0.1:2699 (fix: check that "
                       "sshd runs there and that the port is right)"),
    (NoValidConnectionsError({("10.0.0.7", 22): OSError(errno.EHOSTUNREACH, "No route")}),
     "unreachable: no route to 10.0.0.7"),
    (OSError(errno.ENETUNREACH, "Network is unreachable"), "unreachable: no route to 10.0.0.7"),
    (TimeoutError("timed out"), "unreachable: timed out after 5s connecting to 10.0.0.7:2699"),
    (socket.gaierror(-2, "Name or service not known"), "unreachable: 10.0.0.7 does not resolve"),
    (paramiko.SSHException("Error reading SSH protocol banner"),
     "unreachable: 10.0.0.7:2699 closed the connection during the SSH handshake"),
    (paramiko.SSHException("No existing session"), "during the SSH handshake"),
    (EOFError(), "during the SSH handshake"),
    (paramiko.AuthenticationException("Authentication failed."),
     "authentication refused for root@10.0.0.7:2699: offered keys: KEYS (fix: add one"),
    (paramiko.BadAuthenticationType("Bad authentication type", ["password"]),
     "authentication refused"),
    (paramiko.SSHException("No authentication methods available"), "authentication refused"),
])
def test_each_connect_failure_reads_as_its_kind(error: BaseException, words: str) -> None:
    assert words in said(error)


def test_a_banner_that_timed_out_says_so() -> None:
    try:
        try:
            raise TimeoutError("timed out")
        except TimeoutError as e:
            raise paramiko.SSHException("Error reading SSH protocol banner") from e
    except paramiko.SSHException as banner:
        assert "did not finish the SSH handshake in time" in said(banner)


def target(tmp_path: Path, **extra: object) -> SimpleNamespace:
    fields: dict[str, object] = {
        "name": "h1", "address": "127.0.0.1", "port": 1, "user": "root", "key_file": None,
        "known_hosts": tmp_path / "known_hosts", "host_key_policy": "strict",
        "connect_timeout": 2.0, "proxy_jump": ()}
    return SimpleNamespace(**(fields | extra))


def test_a_closed_port_for_real(tmp_path: Path) -> None:
    with socket.socket() as s:  # a loopback port with no listener
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with pytest.raises(TransportError) as caught:
        SshTransport(target(tmp_path, port=port)).open()
    assert caught.value.kind == "refused"
    assert f"connection refused on 127.0.0.1:{port}" in no_library_text(str(caught.value))


@pytest.mark.parametrize(("make", "why"), [
    (lambda p: None, "(not found)"),
    (lambda p: (p.write_text("x"), p.chmod(0)), "cannot be opened"),
    (lambda p: p.write_text("not a key"), "is not a private key"),
])
def test_a_key_file_that_cannot_be_read_is_its_own_kind(tmp_path: Path, make: object,
                                                         why: str) -> None:
    path = tmp_path / "id"
    make(path)  # type: ignore[operator]
    with pytest.raises(TransportError) as caught:
        SshTransport(target(tmp_path, key_file=path)).open()
    message = str(caught.value)
    if why == "cannot be opened" and "not a private key" in message:
        pytest.skip("running as root: mode 0 does not stop a read")
    assert caught.value.kind == "key-file" and "unreachable" not in message
    assert message.startswith(f"key file unreadable: {path} ") and why in message


def test_an_unknown_host_key_names_the_keyscan_line(tmp_path: Path) -> None:
    key = paramiko.Ed25519Key.from_private_key_file(str(_a_key(tmp_path)))
    with pytest.raises(HostKeyError) as caught:
        _Refuse(tmp_path / "kh").missing_host_key(paramiko.SSHClient(), "[10.0.0.7]:2201", key)
    message = no_library_text(str(caught.value))
    assert message.startswith(f"host key unknown for 10.0.0.7:2201 (ssh-ed25519 {key.fingerprint}")
    assert f"`ssh-keyscan -p 2201 10.0.0.7 >> {tmp_path / 'kh'}`" in message


def test_a_changed_host_key_names_both_and_the_ssh_keygen_line(tmp_path: Path) -> None:
    got = paramiko.Ed25519Key.from_private_key_file(str(_a_key(tmp_path, "a")))
    expected = paramiko.Ed25519Key.from_private_key_file(str(_a_key(tmp_path, "b")))
    hostile = "evil;rm -rf ~"
    error = _changed(paramiko.BadHostKeyException(hostile, got, expected),
                     target(tmp_path, address=hostile, port=2201))
    message = str(error)
    assert isinstance(error, HostKeyError) and error.kind == "host-key-changed"
    assert f"expected {expected.fingerprint}, got {got.fingerprint}" in message
    assert f"ssh-keygen -R '[evil;rm -rf ~]:2201' -f {tmp_path / 'known_hosts'}" in message


def _a_key(tmp_path: Path, name: str = "k") -> Path:
    import subprocess

    path = tmp_path / name
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(path)], check=True)
    return path


def test_a_session_lost_mid_run_names_what_it_was_doing() -> None:
    transport = SshTransport.__new__(SshTransport)
    transport.name, transport._agent, transport._conn = "h1", None, None

    def no_session() -> None:
        raise paramiko.SSHException("No existing session")

    with pytest.raises(TransportError) as caught:
        transport._through(None, no_session, "ops.stop")  # type: ignore[arg-type]
    assert no_library_text(str(caught.value)).startswith("connection lost to h1 during ops.stop")


@pytest.fixture
def silent_port() -> Iterator[int]:
    """A loopback port that accepts connections and never answers."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen(8)
        yield s.getsockname()[1]


def test_urls_that_do_not_answer(silent_port: int) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        closed = s.getsockname()[1]
    for port, words in ((closed, "connection refused"), (silent_port, "timed out")):
        url = f"http://127.0.0.1:{port}/manifest.json"
        with pytest.raises(requests.RequestException) as caught:
            requests.get(url, timeout=0.3)
        message = no_library_text(str(url_failure(EnvironmentProblem, url, caught.value)))
        assert message.startswith(f"cannot fetch {url}: {words} (fix: ")


def test_an_http_reason_from_a_server_is_escaped_and_cut() -> None:
    reason = "Not Found\x1b[2J\r\nforged line" + "x" * 5000
    message = str(url_failure(UserError, "http://h/m", status=404, reason=reason))
    assert message.startswith("cannot fetch http://h/m: HTTP 404 Not Found\\x1b[2J\\r\\nforged")
    assert "\x1b" not in message and "\n" not in message and len(message) < 600


def test_a_closed_manifest_url_from_release(tmp_path: Path) -> None:
    from rollout.bundle.remote import remote_release

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        base = f"http://127.0.0.1:{s.getsockname()[1]}/r1"
    with pytest.raises(EnvironmentProblem) as caught:
        remote_release(base, tmp_path)
    assert no_library_text(str(caught.value)).startswith(
        f"cannot fetch {base}/manifest.json: connection refused")


def test_docker_down_is_said_plainly(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    sock = f"unix://{tmp_path}/docker.sock"
    with pytest.raises(docker.errors.DockerException) as caught:
        docker.from_env(version="auto", environment={"DOCKER_HOST": sock})
    monkeypatch.setenv("DOCKER_HOST", sock)
    message = no_library_text(str(docker_failure(EnvironmentProblem, caught.value)))
    assert message == (f"the Docker engine at DOCKER_HOST={sock} does not answer (fix: check "
                       "that engine, or unset DOCKER_HOST (rollout starts a local dockerd only "
                       "when it is unset))")
    monkeypatch.delenv("DOCKER_HOST")
    assert str(docker_failure(EnvironmentProblem, caught.value)) == (
        "Docker is not running (could not reach /var/run/docker.sock) (fix: start it with "
        "'systemctl start docker' or 'dockerd &' (run as root, rollout starts dockerd itself))")
    monkeypatch.setenv("DOCKER_HOST", sock)
    with pytest.raises(EnvironmentProblem) as down:
        engine.ensure_engine()  # DOCKER_HOST set: rollout starts none of its own
    assert str(down.value) == message


def test_docker_refusing_this_user_says_so() -> None:
    try:
        try:
            raise PermissionError(errno.EACCES, "Permission denied")
        except PermissionError as e:
            raise docker.errors.DockerException("Error while fetching server API version") from e
    except docker.errors.DockerException as refused:
        assert "permission denied" in str(docker_failure(EnvironmentProblem, refused))


def test_every_kind_has_words_and_a_fix_and_the_docs_list_them() -> None:
    assert all(f.words and f.fix for f in FAILURES.values())
    assert errors_markdown() in DOCS.read_text(), "docs/errors.md is stale"


def test_the_cli_prints_the_words_once(capsys: pytest.CaptureFixture[str]) -> None:
    from invoke.exceptions import Exit

    from rollout.cli.errors import reports_errors

    @reports_errors
    def fails() -> None:
        raise connect_failure(refused_on(2699), TO, lambda: "")

    with pytest.raises(Exit) as caught:
        fails()
    assert caught.value.message == ("error: unreachable: connection refused on 127.0.0.1:2699 "
                                    "(fix: check that sshd runs there and that the port is "
                                    "right)")


def test_a_host_ends_by_its_failures_kind() -> None:
    assert [host_status(k) for k in ("refused", "auth", "host-key-changed", "lost", "")] == [
        "unreachable"] * 5
    assert host_status("key-file") == "failed" and host_status("path-denied") == "failed"


class _Bus:
    def __init__(self) -> None:
        self.ends: list[dict[str, object]] = []

    def emit(self, kind: str, **fields: object) -> None:
        self.ends.append(fields)


def _connect_fails(error: RolloutError) -> tuple[HostOutcome, list[dict[str, object]]]:
    def connect(name: str) -> None:
        raise error

    bus = _Bus()
    hosts = SimpleNamespace(bus=bus, connect=connect)
    locks = SimpleNamespace(not_locked=lambda name: None, transport=lambda name: None)
    run = HostRun(hosts, None, locks, None)  # type: ignore[arg-type]
    return run("h1", None, None), bus.ends  # type: ignore[arg-type]


def test_a_key_file_fails_its_host_in_words_not_as_unreachable(tmp_path: Path) -> None:
    missing = failure(TransportError, "key-file", path=tmp_path / "id", why="not found")
    outcome, ends = _connect_fails(missing)
    assert (outcome.status, outcome.kind) == ("failed", "key-file")
    assert outcome.reason.startswith(f"key file unreadable: {tmp_path / 'id'} (not found) (fix:")
    assert ends[0]["status"] == "failed" and ends[0]["data"]["kind"] == "key-file"  # type: ignore[index]
    outcome, _ = _connect_fails(connect_failure(refused_on(2699), TO, lambda: ""))
    assert (outcome.status, outcome.kind) == ("unreachable", "refused")


def test_a_lock_that_could_not_be_taken_keeps_its_kind_and_no_class_name() -> None:
    seen: dict[str, str] = {}
    events = LockEvents(lambda hosts: None, lambda found: None, lambda found: None,
                        seen.__setitem__)
    locks = FleetLocks(Holder("r1", "op", "ctl", 1, 0.0, "v"), LockPolicy(), events)
    denied = failure(StepFailed, "path-denied", path="/data/rollout", user="prover")
    locks._unreachable("h1", denied)
    locks._unreachable("h2", TransportError("cannot reach it"))
    assert seen["h1"] == str(denied) and not seen["h2"].startswith("TransportError")
    assert locks.kinds == {"h1": "path-denied", "h2": ""}
