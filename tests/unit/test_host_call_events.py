"""Each host call a step makes is a host_call event, as small as the dry run's --json gives it."""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

from contexts import host_context

from rollout.steps.decision import Call, call_record, write_call


def test_a_long_text_is_recorded_by_its_sha256_and_length() -> None:
    record = call_record("write_file", {"path": "/p", "text": "x" * 500}, ("pid",))
    digest = hashlib.sha256(b"x" * 500).hexdigest()
    assert record == {"call": "write_file", "runtime": ["pid"],
                      "kwargs": {"path": "/p", "text": {"sha256": digest, "chars": 500}}}
    assert call_record("stop", {"root": "/data"}) == {"call": "stop", "kwargs": {"root": "/data"}}


def test_each_call_a_step_makes_is_a_host_call_event(tmp_path: Path) -> None:
    events: list[dict[str, Any]] = []
    ctx = host_context(emit=lambda kind, **f: events.append({"kind": kind, **f}))
    call = write_call(str(tmp_path / "f"), "hello\n")
    assert ctx.write(call) and not ctx.write(call)
    assert [e["data"] for e in events] == [call.as_record()] * 2
    assert events[0]["kind"] == "host_call"
    assert Call("drain", {"root": "/d"}, runtime=("pid",)).as_record()["runtime"] == ["pid"]


def test_validate_envs_values_are_never_recorded() -> None:
    command = "export TOKEN='s3cret'; export B=x; cuzk-bench single"
    assert call_record("prove", {"command": command}) == {
        "call": "prove", "kwargs": {"command": "export TOKEN=...; export B=...; cuzk-bench single"}}
    long = call_record("prove", {"command": command + " " * 300})["kwargs"]
    assert "s3cret" not in str(long)
