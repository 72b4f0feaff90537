"""Every option is declared once; docs/options.md is generated from those declarations."""

from __future__ import annotations

from pathlib import Path

from rollout.config.docs import options_markdown
from rollout.steps.kinds import HOST_KINDS

DOCS = Path(__file__).resolve().parents[2] / "docs" / "options.md"


def test_options_page_is_generated_from_the_models() -> None:
    assert DOCS.read_text() == options_markdown(HOST_KINDS), (
        "docs/options.md is stale: run `rollout docs --output docs/options.md`"
    )


def test_every_playbook_step_kind_is_documented() -> None:
    text = options_markdown(HOST_KINDS)
    for kind in ("preflight", "supervise", "upload", "drain", "validate", "prune"):
        assert kind in text
