"""Values that reach a remote shell are quoted; secrets never reach events or reports."""

from __future__ import annotations

import io
import json

import pytest

from rollout.config.render import render_shell
from rollout.errors import UserError
from rollout.host.layout import q
from rollout.output.events import EventBus, JsonLinesSink
from rollout.secrets import MASK, redact, secret


def test_injection_in_a_template_value_stays_one_word() -> None:
    cmd = render_shell("bench --c1 {{ path }}", {"path": "x; touch /tmp/pwned"})
    assert cmd == "bench --c1 'x; touch /tmp/pwned'"


def test_raw_filter_is_the_only_way_to_insert_shell_syntax() -> None:
    assert render_shell("a {{ p | raw }}", {"p": "| tail -n 1"}) == "a | tail -n 1"


def test_safe_values_are_left_readable() -> None:
    assert render_shell("{{ d }}/cuzk-bench", {"d": "/data/releases/ab12"}) == (
        "/data/releases/ab12/cuzk-bench"
    )


@pytest.mark.parametrize("value", ["x; touch /tmp/pwned", "$(reboot)", "`id`", "a'b", "a\nb"])
def test_layout_quote_is_inert(value: str) -> None:
    import subprocess

    out = subprocess.run(["sh", "-c", f"printf %s {q(value)}"], capture_output=True, text=True)
    assert out.stdout == value


def test_secret_from_environment_is_masked_in_events(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ROLLOUT_TEST_TOKEN", "s3cr3t-value-123")
    value = secret("ROLLOUT_TEST_TOKEN")
    stream = io.StringIO()
    bus = EventBus("run")
    bus.subscribe(JsonLinesSink(stream))
    bus.emit(
        "step_end",
        host="h",
        reason=f"`curl -H token:{value}` exited 7",
        data={"output": [f"echo {value}"]},
    )
    text = stream.getvalue()
    assert value not in text
    assert MASK in json.loads(text)["reason"]
    assert redact({"a": (value,)}) == {"a": (MASK,)}


def test_missing_secret_is_a_user_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("ROLLOUT_NOPE", raising=False)
    with pytest.raises(UserError, match="ROLLOUT_NOPE"):
        secret("ROLLOUT_NOPE")
