"""`rollout report RUN_ID --html FILE`: one self-contained page (inline CSS and SVG, nothing
from the network) built from the run's journal: a timeline per host (each step a bar,
failures red, rollbacks marked), each drain's memory curve with its budget line, and the
results table."""

from __future__ import annotations

import time

from rollout.output.escape import html_text as escape
from rollout.reports.drain_curve import Curve, drain_curves
from rollout.reports.runlog import CONTROLLER, HostRun, RunRecord, StepRun
from rollout.reports.summary import secs
from rollout.units import format_size

LABEL_W, PLOT_W, ROW_H, BAR_H, AXIS_H = 130, 860, 34, 18, 24
CURVE_W, CURVE_H, PAD = 440, 200, 64

CSS = """
body{font:14px system-ui,sans-serif;margin:24px;color:#1d232b;background:#fff}
h1{font-size:20px}h2{font-size:16px;margin-top:28px}
.meta{color:#555}.aborted{color:#b42318;font-weight:600}
svg text{font:12px system-ui,sans-serif;fill:#1d232b}
.step{stroke:#fff;stroke-width:1}
.status-ok{fill:#2f9e44}.status-changed{fill:#e8a317}.status-skipped{fill:#adb5bd}
.status-failed{fill:#d92d20}.status-running{fill:#74c0fc}
.step.rollback{stroke:#5f3dc4;stroke-width:2;stroke-dasharray:4 2}
.rollback-mark{fill:none;stroke:#5f3dc4;stroke-width:2}.rollback-label{fill:#5f3dc4}
.bar-label{fill:#fff;font-size:11px;pointer-events:none}
.grid{stroke:#e9ecef}.axis{stroke:#868e96}
.curve{fill:none;stroke:#1971c2;stroke-width:2}
.budget{stroke:#d92d20;stroke-width:1.5;stroke-dasharray:6 3}.limit{stroke:#868e96}
figure.memory{display:inline-block;margin:0 16px 16px 0}
.last-sample{fill:#1971c2}.axis-title,.y-title,.x-title{fill:#555}
table{border-collapse:collapse}td:nth-child(-n+4){white-space:nowrap}
th,td{border:1px solid #dee2e6;padding:4px 8px;text-align:left}
.legend span{display:inline-block;width:12px;height:12px;margin:0 4px 0 12px;vertical-align:-2px}
td.validated{color:#2b8a3e;font-weight:600}td.failed,td.unreachable,td.locked{color:#b42318}
td.rolled_back{color:#5f3dc4;font-weight:600}
"""


def _attr(value: object) -> str:
    return escape(str(value), quote=True)


def _bar(step: StepRun, host: str, x: float, y: float, w: float) -> str:
    cls = f"step status-{_attr(step.status)}" + (" rollback" if step.rollback else "")
    tip = f"{step.name}: {step.status} in {secs(step.duration)}: {step.reason}"
    return (f'<rect class="{cls}" data-host="{_attr(host)}" data-step="{_attr(step.name)}" '
            f'data-status="{_attr(step.status)}" x="{x:.1f}" y="{y:.1f}" width="{w:.1f}" '
            f'height="{BAR_H}"><title>{escape(tip)}</title></rect>')


def _bar_label(step: StepRun, x: float, y: float, w: float) -> str:
    name = step.name.removeprefix("rollback-")
    if w < 7 * len(name) + 6:
        return ""
    return f'<text class="bar-label" x="{x + 3:.1f}" y="{y + BAR_H - 5:.1f}">{escape(name)}</text>'


def _rollback_mark(steps: list[tuple[StepRun, float, float]], y: float) -> str:
    back = [(x, w) for step, x, w in steps if step.rollback]
    if not back:
        return ""
    x0, x1 = back[0][0], back[-1][0] + back[-1][1]
    return (f'<path class="rollback-mark" d="M{x0:.1f},{y + 4:.1f} V{y:.1f} H{x1:.1f} '
            f'V{y + 4:.1f}"/><text class="rollback-label" x="{x0:.1f}" y="{y - 2:.1f}">'
            f"rollback</text>")


def _host_row(host: HostRun, index: int, t0: float, scale: float) -> str:
    top = AXIS_H + index * ROW_H
    y = top + (ROW_H - BAR_H) / 2 + 4
    placed = []
    for step in host.steps:
        x = LABEL_W + (step.start - t0) * scale
        placed.append((step, x, max(2.0, step.duration * scale)))
    bars = "".join(_bar(step, host.name, x, y, w) + _bar_label(step, x, y, w)
                   for step, x, w in placed)
    label = f'<text x="4" y="{y + BAR_H - 5:.1f}">{escape(host.name)}</text>'
    return (f'<g class="host-row" data-host="{_attr(host.name)}">{label}{bars}'
            f"{_rollback_mark(placed, y - 3)}</g>")


def _axis(span: float, scale: float, height: int) -> str:
    step = next((s for s in (1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 1800, 3600)
                 if span / s <= 10), 7200)
    ticks, t = [], 0
    while t <= span:
        x = LABEL_W + t * scale
        ticks.append(f'<line class="grid" x1="{x:.1f}" y1="{AXIS_H - 6}" x2="{x:.1f}" '
                     f'y2="{height}"/><text x="{x + 2:.1f}" y="{AXIS_H - 10}">{secs(t)}</text>')
        t += step
    title = f'<text class="axis-title" x="4" y="{AXIS_H - 10}">seconds from start</text>'
    return title + "".join(ticks)


def timeline(record: RunRecord) -> str:
    hosts = [h for h in record.hosts.values() if h.steps]
    starts = [h.start for h in hosts if h.start is not None]
    t0 = min(starts, default=record.start)
    t1 = max([h.end or t0 for h in hosts] + [record.end or t0])
    span = max(t1 - t0, 1.0)
    scale = PLOT_W / span
    height = AXIS_H + ROW_H * len(hosts) + 8
    rows = "".join(_host_row(h, i, t0, scale) for i, h in enumerate(hosts))
    return (f'<svg id="timeline" xmlns="http://www.w3.org/2000/svg" '
            f'width="{LABEL_W + PLOT_W + 40}" height="{height}" role="img" '
            f'aria-label="each host\'s steps over seconds from the first step">'
            f"{_axis(span, scale, height)}{rows}</svg>")


def seconds(value: float) -> str:
    """A time for an axis: milliseconds below a second, else as the tables write it."""
    return f"{value * 1000:.0f} ms" if value < 1 else secs(value)


def _curve_axes(top: float, span: float) -> list[str]:
    """Both axes with their units: memory (working set) up, seconds since the drain began
    along."""
    bottom, right = CURVE_H - 34, CURVE_W - 8
    return [f'<line class="axis" x1="{PAD}" y1="{bottom}" x2="{right}" y2="{bottom}"/>'
            f'<line class="axis" x1="{PAD}" y1="20" x2="{PAD}" y2="{bottom}"/>',
            f'<text class="y-title" x="2" y="12">working set (bytes)</text>'
            f'<text class="y-tick" x="{PAD - 4}" y="24" text-anchor="end">'
            f"{escape(format_size(int(top)))}</text>"
            f'<text class="y-tick" x="{PAD - 4}" y="{bottom}" text-anchor="end">0</text>',
            f'<text class="x-tick" x="{PAD}" y="{bottom + 14}">0</text>'
            f'<text class="x-tick" x="{right}" y="{bottom + 14}" text-anchor="end">'
            f"{seconds(span)}</text>"
            f'<text class="x-title" x="{(PAD + right) / 2:.0f}" y="{CURVE_H - 4}" '
            f'text-anchor="middle">seconds since the drain began</text>']


def _curve_svg(curve: Curve) -> str:
    top = 1.1 * max([b for _, b in curve.points] + [curve.line or 0, 1])
    span = max([t for t, _ in curve.points] + [0.001])
    bottom = CURVE_H - 34

    def xy(t: float, b: float) -> str:
        x = PAD + t / span * (CURVE_W - PAD - 8)
        return f"{x:.1f},{bottom - b / top * (bottom - 20):.1f}"

    points = " ".join(xy(t, b) for t, b in curve.points)
    parts = _curve_axes(top, span)
    for cls, value, label in (("limit", curve.limit, "cgroup memory limit "
                               + format_size(int(curve.limit or 0))),
                              ("budget", curve.line, curve.line_label)):
        if value and value <= top:
            y = xy(0, value).split(",")[1]
            parts.append(f'<line class="{cls}" x1="{PAD}" y1="{y}" x2="{CURVE_W - 8}" y2="{y}"/>'
                         f'<text x="{CURVE_W - 8}" y="{float(y) - 3:.1f}" '
                         f'text-anchor="end">{escape(label)}</text>')
    parts.append(f'<polyline class="curve" data-host="{_attr(curve.host)}" '
                 f'data-step="{_attr(curve.step)}" points="{points}"/>')
    last_x, last_y = xy(*curve.points[-1]).split(",")
    parts.append(f'<circle class="last-sample" cx="{last_x}" cy="{last_y}" r="3"/>')
    return (f'<svg xmlns="http://www.w3.org/2000/svg" width="{CURVE_W}" height="{CURVE_H}" '
            f'role="img" aria-label="working set in bytes over seconds since the drain began">'
            + "".join(parts) + "</svg>")


def memory_section(record: RunRecord) -> str:
    curves = drain_curves(record)
    if not curves:
        return "<p>No drain recorded memory samples in this run.</p>"
    return "".join(
        f'<figure class="memory" data-host="{_attr(c.host)}" data-step="{_attr(c.step)}">'
        f"<figcaption>{escape(c.host)}, step {escape(c.step)}: {escape(c.outcome)}"
        f"</figcaption>"
        f"{_curve_svg(c)}</figure>"
        for c in curves
    )


def results_table(record: RunRecord) -> str:
    rows = []
    for h in (h for h in record.hosts.values() if h.name != CONTROLLER):
        changed = ", ".join(s.name for s in h.changed) or "nothing"
        rows.append(f'<tr data-host="{_attr(h.name)}"><td>{escape(h.name)}</td>'
                    f'<td class="{_attr(h.status)}">{escape(h.status)}</td>'
                    f"<td>{escape((h.release or '-')[:12])}</td><td>{secs(h.duration)}</td>"
                    f"<td>{escape(changed)}</td><td>{escape(h.reason)}</td></tr>")
    head = "".join(f"<th>{c}</th>" for c in ("host", "result", "release id", "took",
                                              "steps that changed the host", "reason"))
    return f'<table class="results"><tr>{head}</tr>{"".join(rows)}</table>'


LEGEND = ('<p class="legend"><span class="status-ok" style="background:#2f9e44"></span>ok'
          '<span style="background:#e8a317"></span>changed'
          '<span style="background:#adb5bd"></span>skipped'
          '<span style="background:#d92d20"></span>failed'
          '<span style="border:2px dashed #5f3dc4"></span>rollback step</p>')


DRAIN_NOTE = ('<p class="meta">The working set (the cgroup\'s memory less the page cache '
              "it can drop), sampled while the old daemon stopped; the dashed line is the level "
              "it had to fall below before the new release started; the dot is the last "
              "sample.</p>")


def render(record: RunRecord) -> str:
    when = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(record.start))
    aborted = f'<p class="aborted">aborted: {escape(record.aborted)}</p>' if record.aborted else ""
    title = f"{record.kind} {record.run_id}: {record.status}"
    what = "to" if record.kind == "rollback" else "version"
    return (f'<!doctype html><html lang="en"><head><meta charset="utf-8">'
            f"<title>{escape(title)}</title><style>{CSS}</style></head><body>"
            f"<h1>{escape(title)}</h1><p class=\"meta\">{what} {escape(record.version or '-')}"
            f" · started {when} · took {secs(record.duration)}</p>{aborted}"
            f"<h2>Timeline: each host's steps, from the first step</h2>{LEGEND}"
            f"{timeline(record)}<h2>Drain memory: the old daemon's memory as it drained</h2>"
            f"{DRAIN_NOTE}{memory_section(record)}"
            f"<h2>Results</h2>{results_table(record)}</body></html>\n")
