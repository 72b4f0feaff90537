"""Issue 28: every file the controller reads comes through rollout.readfile: a FIFO, a device,
a folder, a link out of its folder, a file over its cap are refused at once (no hang, memory
bounded), and no error quotes the file's contents."""

from __future__ import annotations

import os
import threading
import tracemalloc
from collections.abc import Callable
from pathlib import Path
from typing import Any

import paramiko
import pytest

from rollout.config.playbook import parse_set_options
from rollout.errors import HostKeyError, UserError
from rollout.output.events import open_private
from rollout.output.resume import MAX_LINE, journal_events
from rollout.readfile import UnreadableFile, read_bytes, read_lines, read_text
from rollout.transport.known_hosts import load_known_hosts
from rollout.transport.ssh import load_private_key

PEAK = 8 << 20  # bytes: what any refusal here may allocate, far under what /dev/zero would


def refused(call: Callable[[], Any], error: type[Exception] = UnreadableFile) -> str:
    """The message of the error `call` raises, checked to allocate under PEAK bytes."""
    tracemalloc.start()
    try:
        with pytest.raises(error) as info:
            call()
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < PEAK
    return str(info.value)


@pytest.fixture
def fifo(tmp_path: Path) -> Path:
    path = tmp_path / "fifo"
    os.mkfifo(path)
    return path


@pytest.mark.timeout(10)
def test_a_fifo_is_refused_without_waiting_for_a_writer(fifo: Path) -> None:
    assert "is a FIFO, not a regular file" in refused(lambda: read_bytes(fifo, "vars file"))
    assert str(fifo) in refused(lambda: read_text(fifo, "inventory file"))


@pytest.mark.timeout(10)
def test_dev_zero_is_refused_without_reading_it() -> None:
    assert "character device" in refused(lambda: read_bytes("/dev/zero", "key_file"))


def test_a_folder_is_refused(tmp_path: Path) -> None:
    assert "is a folder" in refused(lambda: read_bytes(tmp_path, "playbook file"))


def test_a_missing_file_is_not_found(tmp_path: Path) -> None:
    assert refused(lambda: read_text(tmp_path / "no", "playbook file")).endswith(
        "playbook file not found")


def test_a_link_out_of_its_folder_is_refused_and_one_inside_is_followed(tmp_path: Path) -> None:
    (tmp_path / "inv").mkdir()
    (tmp_path / "secret").write_text("root:SECRET\n")
    (tmp_path / "inv" / "out.yml").symlink_to(tmp_path / "secret")
    (tmp_path / "inv" / "real.yml").write_text("a: 1\n")
    (tmp_path / "inv" / "in.yml").symlink_to(tmp_path / "inv" / "real.yml")
    message = refused(lambda: read_text(tmp_path / "inv" / "out.yml", "vars file",
                                        inside=tmp_path / "inv"))
    assert "leads out of" in message and "SECRET" not in message
    assert read_text(tmp_path / "inv" / "in.yml", "vars file", inside=tmp_path / "inv") == "a: 1\n"


def test_a_file_over_its_cap_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "big"
    path.write_bytes(b"x" * 1025)
    assert "1,024-byte cap" in refused(lambda: read_bytes(path, "known_hosts", limit=1024))
    assert read_bytes(path, "known_hosts", limit=1025) == b"x" * 1025


@pytest.mark.timeout(10)
def test_a_file_that_grows_while_read_is_cut_at_its_cap(tmp_path: Path) -> None:
    path = tmp_path / "growing"
    path.write_bytes(b"x" * 1024)
    stop = threading.Event()

    def grow() -> None:
        with path.open("ab") as f:
            while not stop.is_set() and f.tell() < 256 << 20:
                f.write(b"y" * (1 << 20))
                f.flush()

    writer = threading.Thread(target=grow)
    writer.start()
    try:
        tracemalloc.start()
        try:
            data = read_bytes(path, "journal", limit=2 << 20)
            assert len(data) <= 2 << 20  # read before it grew past the cap
        except UnreadableFile as e:
            assert "cap" in str(e)
        assert tracemalloc.get_traced_memory()[1] < PEAK
    finally:
        tracemalloc.stop()
        stop.set()
        writer.join()


def test_not_utf8_is_refused_by_offset_never_shown(tmp_path: Path) -> None:
    path = tmp_path / "vars.yaml"
    path.write_bytes(b"a: SECRET\xff\n")
    message = refused(lambda: read_text(path, "vars file"))
    assert "at byte 9" in message and "SECRET" not in message


def test_a_long_line_is_skipped_without_holding_it(tmp_path: Path) -> None:
    path = tmp_path / "j.jsonl"
    path.write_bytes(b"first\n" + b"x" * (16 << 20) + b"\nlast\n")
    tracemalloc.start()
    try:
        lines = list(read_lines(path, "journal", max_line=1024, limit=32 << 20))
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert lines == [(1, b"first\n"), (2, None), (3, b"last\n")]
    assert peak < 4 << 20
    assert "cap" in refused(lambda: list(read_lines(path, "journal", max_line=64, limit=1 << 20)))


@pytest.mark.timeout(10)
def test_a_journal_that_is_a_fifo_or_holds_a_huge_line_is_bounded(
    tmp_path: Path, fifo: Path
) -> None:
    refused(lambda: journal_events(fifo))
    path = tmp_path / "r1.jsonl"
    path.write_bytes(b'{"kind": "run_start"}\n' + b"[" * (MAX_LINE * 3) + b"\n")
    events, warnings = journal_events(path)
    assert [e["kind"] for e in events] == ["run_start"] and ":2: a line of more than" in warnings[0]


@pytest.mark.timeout(10)
def test_a_journal_path_that_is_a_fifo_is_refused_not_waited_on(fifo: Path) -> None:
    refused(lambda: open_private(fifo, append=True), UserError)


@pytest.mark.timeout(10)
@pytest.mark.parametrize("source", ["/dev/zero", "fifo"])
def test_set_at_a_fifo_or_dev_zero_is_refused_at_once(tmp_path: Path, fifo: Path,
                                                      source: str) -> None:
    path = fifo if source == "fifo" else Path(source)
    assert "not a regular file" in refused(lambda: parse_set_options([f"@{path}"]))


@pytest.mark.timeout(10)
@pytest.mark.parametrize("source", ["/dev/zero", "fifo"])
def test_a_key_file_that_is_a_fifo_or_dev_zero_is_refused_at_once(fifo: Path,
                                                                  source: str) -> None:
    path = fifo if source == "fifo" else Path(source)
    message = refused(lambda: load_private_key(path))
    assert str(path) in message and "key_file is a" in message


def test_a_key_file_error_never_quotes_the_key(tmp_path: Path) -> None:
    path = tmp_path / "id"
    path.write_text("-----BEGIN SECRET PRIVATE KEY-----\nSECRETSECRET\n-----END SECRET-----\n")
    message = refused(lambda: load_private_key(path))
    assert "not a private key" in message and "SECRET" not in message


def test_a_linked_key_file_outside_any_folder_still_loads(tmp_path: Path) -> None:
    key = paramiko.ECDSAKey.generate()
    key.write_private_key_file(str(tmp_path / "real"))
    (tmp_path / "dotfiles").mkdir()
    (tmp_path / "dotfiles" / "id").symlink_to(tmp_path / "real")
    assert load_private_key(tmp_path / "dotfiles" / "id").get_base64() == key.get_base64()


@pytest.mark.timeout(10)
def test_a_known_hosts_that_is_a_fifo_fails_its_host_at_once(fifo: Path) -> None:
    message = refused(lambda: load_known_hosts(paramiko.HostKeys(), fifo), HostKeyError)
    assert "cannot read known_hosts" in message and "FIFO" in message
