"""The params probe's answer is a host's, hostile data: a part of the wrong JSON type is
read as nothing (every file missing, no notes), never a crash."""

from __future__ import annotations

from pathlib import Path

import pytest
from test_params import NAME, context, entry

from rollout.jsontypes import JSON
from rollout.steps.params import _missing, _summary


@pytest.mark.parametrize("hostile", [[1, 2], "sizes", 7, None, True])
def test_a_probe_answer_of_the_wrong_type_counts_every_file_missing(
    tmp_path: Path, hostile: JSON
) -> None:
    ctx = context(tmp_path, files=[entry()])
    missing = _missing(ctx, {"sizes": hostile, "reuse": hostile})
    assert [f.name for f in missing] == [NAME]


def test_a_present_file_is_not_missing(tmp_path: Path) -> None:
    ctx = context(tmp_path, files=[entry()])
    assert _missing(ctx, {"sizes": {NAME: 16384}, "reuse": {}}) == []


def test_a_report_whose_parts_are_not_objects_has_no_notes(tmp_path: Path) -> None:
    ctx = context(tmp_path, files=[entry()])
    assert _summary(ctx, {}, {}, {}).endswith(": none")
    note = _summary(ctx, {NAME: ["x"]}, {NAME: "$(reboot)"}, {})
    assert "$(reboot)" not in note and NAME in note
