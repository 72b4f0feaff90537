"""The side-by-side bench's arithmetic: medians, ratios, targets met or not, and its table."""

from __future__ import annotations

import math

import pytest

from rollout.bench.figures import (
    Comparison,
    Pair,
    Rerun,
    Run,
    median,
    ratio,
    summary_json,
    summary_table,
)


def _pair(rollout_s: float, floor_s: float, cpu_s: float = 0.8, rss: float = 70.0) -> Pair:
    return Pair(Run(rollout_s, cpu_s, rss), floor_s, rollout_first=True)


def test_median_and_ratio() -> None:
    assert median([3.0, 1.0, 2.0]) == 2.0
    assert median([4.0, 1.0]) == 2.5
    with pytest.raises(ValueError):
        median([])
    assert ratio(12.0, 10.0) == pytest.approx(1.2)
    assert math.isinf(ratio(1.0, 0.0))


def test_comparison_takes_medians_of_each_side_and_judges_the_targets() -> None:
    c = Comparison("8 hosts", 8, (_pair(10.0, 6.0, 0.4), _pair(30.0, 5.0, 3.2),
                                   _pair(9.0, 8.0, 0.6, rss=91.0)))  # fmt: skip
    assert c.rollout_median_s == 10.0 and c.floor_median_s == 6.0
    assert c.ratio == pytest.approx(10 / 6)
    assert c.cpu_s_per_host == pytest.approx(0.6 / 8)
    assert c.peak_rss_mib == 91.0
    d = c.as_dict()
    assert d["ratio_met"] is False and d["cpu_s_per_host_met"] is True
    assert d["rollout_s"] == [10.0, 30.0, 9.0] and d["floor_s"] == [6.0, 5.0, 8.0]

    close = Comparison("8 hosts", 8, (_pair(7.2, 6.0),))
    assert close.as_dict()["ratio_met"] is True  # 1.2x exactly is within the target


def test_table_lists_each_figure_with_its_target_and_verdict() -> None:
    c = Comparison("16 hosts", 16, (_pair(15.0, 10.0, 3.2),))
    text = summary_table([c], Rerun(8, Run(1.5, 0.9, 60.0)))
    lines = text.splitlines()
    assert lines[0].startswith("| measure") and set(lines[1]) <= {"|", "-", " "}
    assert len({len(line) for line in lines}) == 1  # columns line up
    ratio_row = next(line for line in lines if "rollout / floor" in line)
    assert "1.50x" in ratio_row and "<= 1.2x" in ratio_row and "not met" in ratio_row
    cpu_row = next(line for line in lines if "CPU s per host" in line)
    assert "0.200" in cpu_row and "not met" in cpu_row
    rerun_row = next(line for line in lines if "rerun" in line)
    assert "1.50 s" in rerun_row and "<= 1.0 s" in rerun_row and "not met" in rerun_row
    quick = next(line for line in summary_table([c], Rerun(8, Run(0.9, 0.5, 60.0))).splitlines()
                 if "rerun" in line)
    assert "| met" in quick


def test_json_carries_every_run_and_the_rerun() -> None:
    c = Comparison("8 hosts", 8, (_pair(10.0, 6.0),))
    out = summary_json([c], None, [{"label": "8 hosts", "before": {"loadavg": [1.0]}}])
    assert out["rerun"] is None and out["comparisons"][0]["hosts"] == 8
    assert out["contention"][0]["label"] == "8 hosts"
    slow = Rerun(8, Run(3.4, 1.0, 60.0)).as_dict()
    assert slow["met"] is False and slow["seconds"] == 3.4


def test_host_cpu_per_host_is_each_sides_median_and_shown_beside_the_others() -> None:
    pairs = tuple(Pair(Run(s, 1.0, 70.0), f, True, mine, floor)
                  for s, f, mine, floor in ((10.0, 8.0, 40.0, 20.0), (11.0, 9.0, 48.0, 22.0),
                                            (12.0, 7.0, 44.0, 30.0)))  # fmt: skip
    c = Comparison("64 hosts", 64, pairs)
    assert c.host_cpu_s_per_host("rollout") == pytest.approx(44.0 / 64)
    assert c.host_cpu_s_per_host("floor") == pytest.approx(22.0 / 64)
    d = c.as_dict()
    assert d["rollout_host_cpu_s"] == [40.0, 48.0, 44.0] and d["floor_host_cpu_s_per_host"] == 0.344
    row = next(line for line in summary_table([c], None).splitlines() if "host CPU" in line)
    assert "0.688 / 0.344 (+0.344)" in row and "<= floor + 0.2" in row and "not met" in row
    near = tuple(Pair(Run(10.0, 1.0, 70.0), 8.0, True, 40.0, 30.0) for _ in range(3))
    row = next(line for line in summary_table([Comparison("64 hosts", 64, near)], None)
               .splitlines() if "host CPU" in line)
    assert "(+0.156)" in row and "| met" in row
    unmeasured = Comparison("8 hosts", 8, (_pair(10.0, 6.0),))
    assert unmeasured.host_cpu_s_per_host("floor") is None
    assert "host CPU" not in summary_table([unmeasured], None)


def test_issue_30s_targets_1_2x_at_every_size_and_0_05_s_of_cpu_from_32_hosts() -> None:
    at_8 = Comparison("8 hosts", 8, (_pair(11.0, 10.0, 0.64),))
    at_32 = Comparison("32 hosts", 32, (_pair(13.0, 10.0, 1.92),))
    at_64 = Comparison("64 hosts", 64, (_pair(14.0, 10.0, 3.2),))
    assert at_8.as_dict()["cpu_s_per_host_target"] == 0.1
    assert at_8.as_dict()["cpu_s_per_host_met"] is True  # 0.08
    assert at_32.as_dict()["ratio_target"] == 1.2 and at_32.as_dict()["ratio_met"] is False
    assert at_32.as_dict()["cpu_s_per_host_target"] == 0.05
    assert at_32.as_dict()["cpu_s_per_host_met"] is False  # 0.06
    assert at_64.as_dict()["ratio_target"] == 1.2 and at_64.as_dict()["ratio_met"] is False
    assert at_64.as_dict()["cpu_s_per_host_met"] is True  # 0.05 exactly
    row = next(line for line in summary_table([at_64], None).splitlines() if "/ floor," in line)
    assert "<= 1.2x" in row and "not met" in row
