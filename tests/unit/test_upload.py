"""The upload: bytes streamed in packet-sized pieces, each file checked on the host as it
lands, a corrupted or cut transfer caught, and the release installed whole or not at all."""

from __future__ import annotations

import hashlib
import json
import os
import stat
import subprocess
import threading
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from contexts import AgentTransport, host_context, small_host

from rollout import failpoints
from rollout.engine.staging import stage, survey
from rollout.errors import StepFailed
from rollout.host.layout import Layout
from rollout.host.reports import FilesReport
from rollout.jsontypes import JSON
from rollout.steps.base import Artifact, HostContext, Release
from rollout.steps.decision import Action
from rollout.steps.install import identities_of
from rollout.steps.kinds.switch import Switch, SwitchParams, switch_calls
from rollout.steps.kinds.switch import apply as switch
from rollout.steps.kinds.upload import apply as upload
from rollout.transport.base import LocalFile, Progress, RunResult, opened, script_command
from rollout.transport.channel import ChannelOutput, _collect, _stream
from rollout.transport.local import LocalTransport
from rollout.transport.ssh import _WRITE_AND_HASH, UPLOAD_CHUNK, SshTransport


class Channel:
    """Records what a paramiko channel would be asked to send."""

    out_max_packet_size = 32768

    def __init__(self) -> None:
        self.sent: list[bytes] = []

    def sendall(self, data: bytes) -> None:
        self.sent.append(bytes(data))


def test_stream_sends_every_byte_once_in_pieces_no_larger_than_a_packet() -> None:
    data = os.urandom(3 * UPLOAD_CHUNK + 12345)
    channel = Channel()
    _stream(channel, [data[i : i + UPLOAD_CHUNK] for i in range(0, len(data), UPLOAD_CHUNK)])  # type: ignore[arg-type]
    assert b"".join(channel.sent) == data
    assert max(len(p) for p in channel.sent) <= Channel.out_max_packet_size - 64


class EndedChannel:
    """A command's channel after its EOF, its exit status still to come: paramiko then
    keeps the channel's pipe readable for good (set_forever)."""

    def __init__(self) -> None:
        self.eof_received, self.closed = True, False
        self.status_event = threading.Event()
        self.reads = 0
        self._read, write = os.pipe()
        os.write(write, b"x")  # readable, and never drained: as paramiko's pipe after EOF
        os.close(write)

    def fileno(self) -> int:
        return self._read

    def recv_ready(self) -> bool:
        self.reads += 1
        return False

    def recv_stderr_ready(self) -> bool:
        return False

    def exit_status_ready(self) -> bool:
        return self.status_event.is_set()

    def recv_exit_status(self) -> int:
        return 0


def test_output_is_not_polled_in_a_busy_loop_between_eof_and_the_exit_status() -> None:
    channel = EndedChannel()
    threading.Timer(0.3, channel.status_event.set).start()  # the exit status comes later
    out = ChannelOutput()
    try:
        _collect(channel, out, None)  # type: ignore[arg-type]
    finally:
        os.close(channel._read)
    assert out.exit_code == 0
    assert channel.reads < 10  # one look before the wait and one after: no spinning


def ssh_transport(name: str) -> tuple[SshTransport, SimpleNamespace]:
    """An SshTransport whose connection is a stand-in: only its socket's close is watched."""
    sock = SimpleNamespace(closed=0)
    sock.close = lambda: setattr(sock, "closed", sock.closed + 1)
    transport = SshTransport.__new__(SshTransport)
    transport.name = name
    transport._conn = SimpleNamespace(  # type: ignore[assignment]
        client=SimpleNamespace(get_transport=lambda: SimpleNamespace(sock=sock)))
    return transport, sock


def arm(monkeypatch: pytest.MonkeyPatch, points: str) -> None:
    monkeypatch.setenv("ROLLOUT_FAILPOINTS", points)
    monkeypatch.setattr(failpoints, "_remaining", None)


def chunks_of(transport: SshTransport, path: Path) -> Iterator[bytes]:
    with path.open("rb") as f:
        yield from transport._chunks(f)


def test_corrupt_failpoint_flips_exactly_one_byte(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    arm(monkeypatch, "upload-corrupt@h1:1")
    transport, sock = ssh_transport("h1")
    data = os.urandom(2 * UPLOAD_CHUNK + 7)
    (tmp_path / "f").write_bytes(data)
    got = b"".join(chunks_of(transport, tmp_path / "f"))
    assert len(got) == len(data) and sock.closed == 0
    assert [i for i in range(len(data)) if got[i] != data[i]] == [len(data) // 2]
    assert b"".join(chunks_of(transport, tmp_path / "f")) == data  # armed once


def test_drop_failpoint_closes_the_socket_half_way(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    arm(monkeypatch, "upload-drop@h1:1")
    transport, sock = ssh_transport("h1")
    (tmp_path / "f").write_bytes(os.urandom(3 * UPLOAD_CHUNK))
    sent = 0
    for chunk in chunks_of(transport, tmp_path / "f"):
        if sock.closed:
            break
        sent += len(chunk)
    assert sock.closed == 1 and sent == 3 * UPLOAD_CHUNK // 2


class CorruptingTransport(AgentTransport):
    """A local 'host' whose uploads arrive with one byte flipped."""

    def put(self, local_path: LocalFile, remote_path: str, resume: bool = False,
            progress: Progress | None = None) -> None:
        with opened(local_path) as f:
            data = bytearray(f.read())
        data[len(data) // 2] ^= 0xFF
        Path(remote_path).write_bytes(bytes(data))


def release_of(tmp_path: Path) -> Release:
    artifacts = []
    for name, size in (("cuzk-daemon", 70_000), ("cuzk-kernels.bin", 3 << 20)):
        path = tmp_path / "bundle" / name
        path.parent.mkdir(exist_ok=True)
        data = os.urandom(size)
        path.write_bytes(data)
        artifacts.append(Artifact(name, str(path), hashlib.sha256(data).hexdigest(), size))
    return Release("0123456789ab", "img", "v1", tuple(artifacts))


def context(tmp_path: Path, transport: LocalTransport, release: Release) -> HostContext:
    """The step's context on a local 'host' under tmp_path, its host calls and scripts run
    by the test process's warm agent (as a host with an agent runs them)."""
    return host_context(small_host("h1"), transport, Layout(str(tmp_path / "data")),
                        release=release)


def test_upload_installs_checked_executables_and_their_manifest(tmp_path: Path) -> None:
    release = release_of(tmp_path)
    result = upload(context(tmp_path, AgentTransport("h1"), release), Action("upload"))
    assert result.status == "changed" and "sha256 verified on host" in result.reason
    dest = tmp_path / "data" / "releases" / release.id
    for a in release.artifacts:
        on_host = dest / a.name
        assert hashlib.sha256(on_host.read_bytes()).hexdigest() == a.sha256
        assert stat.S_IMODE(on_host.stat().st_mode) == 0o755
    assert json.loads((dest / "RELEASE.json").read_text()) == release.to_dict()
    assert sorted(p.name for p in dest.parent.iterdir()) == [release.id]  # no partial left


def test_a_corrupted_upload_fails_and_leaves_no_release(tmp_path: Path) -> None:
    release = release_of(tmp_path)
    with pytest.raises(StepFailed, match="sha256 mismatch on host after upload: cuzk-daemon"):
        upload(context(tmp_path, CorruptingTransport("h1"), release), Action("upload"))
    assert list((tmp_path / "data" / "releases").iterdir()) == []


def test_host_side_write_and_hash_stores_the_bytes_and_prints_their_digest(
    tmp_path: Path,
) -> None:
    data = os.urandom(5 * UPLOAD_CHUNK // 2)
    target = tmp_path / "cuzk-daemon"
    done = subprocess.run(["python3", "-c", _WRITE_AND_HASH, str(target), "755"], input=data,
                          capture_output=True, check=True)  # fmt: skip
    assert done.stdout.decode().split() == [hashlib.sha256(data).hexdigest()]
    assert target.read_bytes() == data and stat.S_IMODE(target.stat().st_mode) == 0o755


class RecordingTransport(AgentTransport):
    """A local 'host' (with its agent) that keeps the commands it was asked to run: a shell
    command, a script's (`python3 - ARGS`), a host call's (`call ops.NAME`)."""

    def __init__(self, name: str) -> None:
        super().__init__(name)
        self.commands: list[str] = []

    def run(self, command: str, timeout: float | None = None,
            stdin: str | None = None) -> Any:  # fmt: skip
        self.commands.append(command)
        return super().run(command, timeout=timeout, stdin=stdin)

    def run_script(self, source: str, args: Sequence[str], timeout: float | None = None,
                   before: str = "") -> RunResult:
        self.commands.append(script_command(args, before))
        return super().run_script(source, args, timeout, before)

    def call(self, source: str, call: str, kwargs: Mapping[str, JSON],
             timeout: float | None = None) -> RunResult:
        self.commands.append(f"call {call} {json.dumps(dict(kwargs))}")
        return super().call(source, call, kwargs, timeout)

    def hashed(self) -> bool:
        return any("sha256sum" in c or c.startswith("call ops.file_sums ")
                   for c in self.commands)


def switch_to(ctx: HostContext) -> Any:
    assert ctx.release is not None
    calls = switch_calls(ctx.target, ctx.release.id, restore=False)
    return switch(ctx, Action("switch", SwitchParams(), Switch(None), calls=calls))


def test_switch_after_this_runs_upload_checks_identity_without_reading_the_bytes(
    tmp_path: Path,
) -> None:
    release = release_of(tmp_path)
    transport = RecordingTransport("h1")
    ctx = context(tmp_path, transport, release)
    upload(ctx, Action("upload"))
    transport.commands.clear()
    result = switch_to(ctx)
    assert result.status == "changed" and result.data["checked"] == "identity"
    assert not transport.hashed()
    assert os.readlink(tmp_path / "data" / "current") == f"releases/{release.id}"


@pytest.mark.parametrize("change", ["truncate", "replace", "rewrite"])
def test_switch_refuses_a_file_changed_after_this_runs_upload(
    tmp_path: Path, change: str
) -> None:
    release = release_of(tmp_path)
    ctx = context(tmp_path, RecordingTransport("h1"), release)
    upload(ctx, Action("upload"))
    exe = tmp_path / "data" / "releases" / release.id / "cuzk-daemon"
    data = exe.read_bytes()
    if change == "truncate":
        os.truncate(exe, len(data) // 2)
    elif change == "replace":
        (exe.parent / "other").write_bytes(data[:-1] + bytes([data[-1] ^ 1]))
        os.replace(exe.parent / "other", exe)
    else:  # same size, same mtime put back: the change time still moves
        before = exe.stat()
        exe.write_bytes(bytes([data[0] ^ 1]) + data[1:])
        os.utime(exe, ns=(before.st_atime_ns, before.st_mtime_ns))
    with pytest.raises(StepFailed, match="is not complete on host"):
        switch_to(ctx)
    assert not (tmp_path / "data" / "current").exists()


def test_switch_to_a_release_this_run_did_not_verify_hashes_it(tmp_path: Path) -> None:
    release = release_of(tmp_path)
    upload(context(tmp_path, AgentTransport("h1"), release), Action("upload"))
    transport = RecordingTransport("h1")
    result = switch_to(context(tmp_path, transport, release))  # another run: no record
    assert result.data["checked"] == "sha256" and transport.hashed()


def test_identities_read_back_are_data_and_a_short_or_odd_answer_matches_nothing() -> None:
    names = ["cuzk-daemon", "cuzk-bench"]

    def read(found: object) -> dict[str, str]:
        return identities_of(FilesReport.parse({"outcome": "read", "identities": found}), names)

    assert read({"cuzk-daemon": "1 2 3 a b", "cuzk-bench": "4 5 6 c d"}) == {
        "cuzk-daemon": "1 2 3 a b", "cuzk-bench": "4 5 6 c d"}
    assert read({"cuzk-daemon": "1 2 3 a b"}) == {}
    assert read({"cuzk-daemon": "1 2 3 a b", "cuzk-bench": None}) == {}
    assert read({"cuzk-daemon": "1 2 3 a b", "cuzk-bench": "x" * 500}) == {}
    assert read(["1 2 3 a b", "4 5 6 c d"]) == {}


def test_staged_files_are_installed_by_a_rename_and_switch_needs_no_hash(tmp_path: Path) -> None:
    release = release_of(tmp_path)
    transport = RecordingTransport("h1")
    ctx = context(tmp_path, transport, release)
    for folder in ("releases", "rollout"):
        (tmp_path / "data" / folder).mkdir(parents=True)
    assert not survey(ctx, release).present and survey(ctx, release).same_device
    ctx.state.staged = stage(ctx, release)
    staging = tmp_path / "data" / "rollout" / "staging"
    assert sorted(p.name for p in (staging / release.id).iterdir()) == sorted(
        a.name for a in release.artifacts)
    transport.commands.clear()
    result = upload(ctx, Action("upload"))
    assert "staged during the canary" in result.reason and len(transport.commands) == 1
    assert not staging.exists()  # the staging folder moved, the empty root went with it
    dest = tmp_path / "data" / "releases" / release.id
    assert json.loads((dest / "RELEASE.json").read_text()) == release.to_dict()
    assert switch_to(ctx).data["checked"] == "identity" and not transport.hashed()


def test_a_staged_file_changed_since_is_not_installed_the_release_is_uploaded(
    tmp_path: Path,
) -> None:
    release = release_of(tmp_path)
    transport = RecordingTransport("h1")
    ctx = context(tmp_path, transport, release)
    ctx.state.staged = stage(ctx, release)
    staged = tmp_path / "data" / "rollout" / "staging" / release.id / "cuzk-daemon"
    data = staged.read_bytes()
    staged.write_bytes(bytes([data[0] ^ 1]) + data[1:])  # same size, another byte
    transport.commands.clear()
    result = upload(ctx, Action("upload"))
    assert "staged" not in result.reason and "sha256 verified on host" in result.reason
    assert not (tmp_path / "data" / "rollout" / "staging").exists()
    on_host = tmp_path / "data" / "releases" / release.id / "cuzk-daemon"
    assert on_host.read_bytes() == (Path(release.artifacts[0].local_path)).read_bytes()


def test_stale_staging_of_other_releases_is_cleared_and_a_present_release_not_staged(
    tmp_path: Path,
) -> None:
    release = release_of(tmp_path)
    ctx = context(tmp_path, AgentTransport("h1"), release)
    stale = tmp_path / "data" / "rollout" / "staging" / "fedcba987654"
    stale.mkdir(parents=True)
    (stale / "cuzk-daemon").write_bytes(b"old")
    assert survey(ctx, release).stale == ["fedcba987654"] and not stale.exists()
    upload(ctx, Action("upload"))
    assert survey(ctx, release).present
