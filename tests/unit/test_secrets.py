"""Secrets: masked in every form, before any cut; files that may hold them are 0600."""

from __future__ import annotations

import base64
import json
import stat
from pathlib import Path
from typing import Any

import pytest
from contexts import host_context

from rollout.config.render import render_shell
from rollout.config.steps import StepSpec
from rollout.engine.stepper import StepRunner
from rollout.errors import CommandFailed, StepFailed
from rollout.output.events import EventBus, JsonLinesSink, StepResult
from rollout.secrets import MASK, secret
from rollout.steps.base import StepTimeout
from rollout.steps.decision import write_call
from rollout.transport.base import RunResult
from rollout.transport.local import LocalTransport

VALUE = "pa'ss-W0rd-\"7f3a9e\"-tail"


@pytest.fixture
def token(monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.setenv("ROLLOUT_TEST_SECRET", VALUE)
    return secret("ROLLOUT_TEST_SECRET")


def events_text(bus: EventBus) -> str:
    return "\n".join(event.to_json() for event in bus.history)


def leaks(text: str, value: str = VALUE, size: int = 5) -> list[str]:
    """Every piece of `value` (of `size` characters) that shows in `text`."""
    pieces = {value[i : i + size] for i in range(len(value) - size + 1)}
    return sorted(p for p in pieces if p in text)


def test_the_shell_quoted_form_is_masked_in_a_command_failed_event(token: str) -> None:
    command = render_shell("curl -H {{ t }} https://x", {"t": token})
    bus = EventBus("run")
    bus.emit("step_end", reason=str(CommandFailed(command, 7, "", "refused")))
    assert MASK in events_text(bus)
    assert leaks(events_text(bus), size=8) == []


@pytest.mark.parametrize(
    "form",
    [
        lambda v: json.dumps({"token": v}),
        lambda v: base64.b64encode(v.encode()).decode(),
        lambda v: render_shell("x '{{ t }}'", {"t": v}),
    ],
)
def test_every_form_of_a_secret_is_masked(token: str, form: Any) -> None:
    bus = EventBus("run")
    bus.emit("note", reason=form(token))
    assert MASK in events_text(bus)


class _TimesOut(LocalTransport):
    def run(
        self, command: str, timeout: float | None = None, stdin: str | None = None
    ) -> RunResult:
        return RunResult(command, 124, "", "(timed out)")


def test_a_command_cut_to_80_characters_keeps_no_prefix_of_a_secret(token: str) -> None:
    ctx = host_context(transport=_TimesOut())
    with pytest.raises(StepTimeout) as info:
        ctx.sh("x" * 70 + token)
    assert leaks(str(info.value), size=4) == []


def test_output_is_masked_before_it_is_cut(token: str) -> None:
    bus = EventBus("run")

    def fails() -> StepResult:
        raise StepFailed("validation failed", retryable=False, output=token + "x" * 1990)

    StepRunner(bus).run(None, StepSpec(name="validate", kind="validate"), fails)  # type: ignore[arg-type]
    assert leaks(events_text(bus), size=4) == []


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_a_written_file_and_its_kept_copy_are_private(tmp_path: Path) -> None:
    ctx = host_context()
    config, kept = tmp_path / "cuzk.toml", tmp_path / "cuzk.toml.for-r1"
    config.write_text("old = 1\n")
    config.chmod(0o644)
    assert ctx.write(write_call(str(config), "token = 'x'\n", str(kept)))
    assert (mode(config), mode(kept)) == (0o600, 0o600)
    assert kept.read_text() == "old = 1\n"
    config.chmod(0o644)
    assert not ctx.write(write_call(str(config), "token = 'x'\n", str(kept)))
    assert mode(config) == 0o600


def test_the_run_journal_is_private(tmp_path: Path) -> None:
    sink = JsonLinesSink.to_path(tmp_path / "runs" / "r.jsonl", durable=True)
    sink.stream.close()
    assert mode(tmp_path / "runs" / "r.jsonl") == 0o600


def test_a_multi_line_secret_is_masked_before_the_last_lines_are_kept(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    key = "-----BEGIN KEY-----\n" + "\n".join(f"line{i}-c0ffee" for i in range(8)) + "\n-----END"
    monkeypatch.setenv("ROLLOUT_TEST_KEY", key)
    secret("ROLLOUT_TEST_KEY")
    error = CommandFailed("cat key", 1, "", f"bad key:\n{key}\n")
    assert "c0ffee" not in str(error)
