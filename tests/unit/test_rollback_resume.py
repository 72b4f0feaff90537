"""`rollout rollback --to` checks what it switches to; `--resume` survives a torn journal."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest
from conftest import CliRunner
from contexts import host_context, small_host

from rollout.bundle.release import release_id_of
from rollout.commands import app
from rollout.errors import StepFailed
from rollout.host.layout import Layout
from rollout.output.events import Event, JsonLinesSink
from rollout.output.journal import read_journal
from rollout.steps.base import Artifact, HostContext
from rollout.steps.manifest import read_release
from rollout.transport.local import LocalTransport

INVENTORY = "defaults:\n  user: root\nhosts:\n  - name: a\n    address: 127.0.0.1\n    port: 1\n"


def host(tmp: Path) -> HostContext:
    return host_context(small_host("h1"), LocalTransport("h1"), Layout(str(tmp)))


def put_release(tmp: Path, files: dict[str, bytes]) -> str:
    artifacts = [Artifact(n, "", hashlib.sha256(d).hexdigest(), len(d)) for n, d in files.items()]
    release_id = release_id_of(artifacts)
    directory = tmp / "releases" / release_id
    directory.mkdir(parents=True)
    for name, data in files.items():
        (directory / name).write_bytes(data)
    manifest = {a.name: {"sha256": a.sha256, "size": a.size} for a in artifacts}
    (directory / "RELEASE.json").write_text(
        json.dumps({"id": release_id, "image": "img", "version": "v1", "artifacts": manifest})
    )
    return release_id


FILES = {"cuzk-daemon": b"daemon v1", "cuzk-bench": b"bench v1"}


def test_a_release_whose_executables_match_its_manifest_is_read(tmp_path: Path) -> None:
    release_id = put_release(tmp_path, FILES)
    release = read_release(host(tmp_path), release_id)
    assert release.version == "v1" and [a.name for a in release.artifacts] == list(FILES)


def test_a_changed_executable_is_refused(tmp_path: Path) -> None:
    release_id = put_release(tmp_path, FILES)
    (tmp_path / "releases" / release_id / "cuzk-daemon").write_bytes(b"something else")
    with pytest.raises(StepFailed, match="sha256 of cuzk-daemon does not match"):
        read_release(host(tmp_path), release_id)


def test_a_manifest_rewritten_to_match_other_executables_is_refused(tmp_path: Path) -> None:
    release_id = put_release(tmp_path, FILES)
    other = put_release(tmp_path, {"cuzk-daemon": b"evil", "cuzk-bench": b"bench v1"})
    manifest = tmp_path / "releases" / other / "RELEASE.json"
    (tmp_path / "releases" / release_id / "RELEASE.json").write_text(manifest.read_text())
    for name in FILES:
        src = tmp_path / "releases" / other / name
        (tmp_path / "releases" / release_id / name).write_bytes(src.read_bytes())
    with pytest.raises(StepFailed, match="executables of another release"):
        read_release(host(tmp_path), release_id)


@pytest.mark.parametrize(
    "manifest",
    ["not json", "null", '{"artifacts": {}}', '{"artifacts": {"../../x": {"sha256": "0"}}}',
     '{"artifacts": {"cuzk-daemon": {"sha256": "$(id)"}}}'],
)  # fmt: skip
def test_a_bad_manifest_is_refused(tmp_path: Path, manifest: str) -> None:
    release_id = put_release(tmp_path, FILES)
    (tmp_path / "releases" / release_id / "RELEASE.json").write_text(manifest)
    with pytest.raises(StepFailed, match="not switching"):
        read_release(host(tmp_path), release_id)


@pytest.mark.parametrize("release_id", ["../../etc", "..", "0123456789ab/..", "-rf", "a b", "ab\n"])
def test_only_release_ids_are_looked_up(tmp_path: Path, release_id: str) -> None:
    with pytest.raises(StepFailed, match="not a release id"):
        read_release(host(tmp_path), release_id)


@pytest.mark.parametrize("to", ["../0123456789ab", "0123456789ab/../x", "/etc"])
def test_rollback_to_a_path_exits_2_before_any_host(
    cli: CliRunner, tmp_path: Path, to: str
) -> None:
    inventory = tmp_path / "fleet.yaml"
    inventory.write_text(INVENTORY)
    p = cli("rollback", "--hosts", str(inventory), "--to", to,
            env={"ROLLOUT_RUNS_DIR": str(tmp_path / "runs")}, cwd=tmp_path)  # fmt: skip
    assert p.returncode == 2, p.stderr
    assert "not a release id" in p.stderr


def journal_with_torn_tail(tmp: Path) -> Path:
    path = tmp / "runs" / "r1.jsonl"
    path.parent.mkdir()
    start = Event("run_start", "r1", data={"request": {
        "hosts": "fleet.yaml", "limit": None, "playbook": None, "sets": []}})  # fmt: skip
    done = Event("host_end", "r1", host="lab-1", status="validated")
    path.write_text(start.to_json() + "\n" + done.to_json() + "\n" + '{"kind": "step_st')
    return path


def test_a_torn_last_line_is_skipped_with_a_warning(tmp_path: Path) -> None:
    events, warnings = read_journal(journal_with_torn_tail(tmp_path))
    assert [e["kind"] for e in events] == ["run_start", "host_end"]
    assert len(warnings) == 1 and "r1.jsonl:3: its last line" in warnings[0]


def test_resume_reads_a_journal_with_a_torn_last_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    journal_with_torn_tail(tmp_path)
    monkeypatch.setenv("ROLLOUT_RUNS_DIR", str(tmp_path / "runs"))
    request, done = app.resume_request(app.RolloutRequest(hosts="", resume="r1"))
    assert request.hosts == "fleet.yaml" and done == {"lab-1"}
    assert "warning:" in capsys.readouterr().err


def test_a_resumed_journal_starts_its_events_on_a_line_of_their_own(tmp_path: Path) -> None:
    path = journal_with_torn_tail(tmp_path)
    sink = JsonLinesSink.to_path(path)
    sink(Event("run_start", "r1"))
    sink.stream.close()
    events, warnings = read_journal(path)
    assert [e["kind"] for e in events] == ["run_start", "host_end", "run_start"]
    assert len(warnings) == 1 and ":3: line 3" in warnings[0]
