"""The params and PCE probes' answers are a host's, hostile data: a part of the wrong JSON
type, or a figure that is not a count of bytes, is read as nothing, never a crash."""

from __future__ import annotations

from pathlib import Path

import pytest
from test_params import NAME, context, entry

from rollout.jsontypes import JSON
from rollout.steps.params import _missing, _summary
from rollout.steps.preflight_inputs import pce_room


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


GIB = 1 << 30


@pytest.mark.parametrize(
    ("pce", "tmp"),
    [
        ({"size": "$(reboot)"}, {"blocks": -5 * GIB}),
        ({"size": True}, {"blocks": 1.5}),
        ([1], "tmp"),
        (None, {"blocks": [GIB]}),
    ],
)
def test_pce_figures_that_are_not_byte_counts_count_as_none(pce: JSON, tmp: JSON) -> None:
    need, have, short = pce_room(16 * GIB, pce, tmp, free=10 * GIB)
    assert (need, have) == (16 * GIB, 10 * GIB)
    assert short is not None and "params.pce_bytes is 16.0GiB" in short, short
