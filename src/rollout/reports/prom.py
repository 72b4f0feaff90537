"""`rollout status --prom FILE`: the fleet status as Prometheus text-format metrics, for
node_exporter's textfile collector (which reads *.prom files; the file is replaced
atomically, so it never reads half of one). Every name starts with `rollout_`, carries its
unit (`_seconds`, `_bytes`) and no timestamp; the counter ends in `_total`, the info
metric in `_info`, as the collector and `promtool check metrics` expect. Every label value
passes output.escape.metric_label: no control character from a host reaches the file raw."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, InfoMetricFamily
from prometheus_client.registry import Collector

from rollout.output.escape import metric_label
from rollout.reports.output import write_atomic

# Every state `rollout status` names (commands/status.py: daemon_state, and unreachable):
# each one its own series per host, the host's current state at 1 and the others at 0.
STATES = ("running", "zombie", "stopped", "held", "blocked", "crash-looping", "dead",
          "unreachable", "unknown")
Family = GaugeMetricFamily | CounterMetricFamily | InfoMetricFamily


def _number(value: Any) -> float | None:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def _labels(*values: Any) -> list[str]:
    """Label values, each from a host or an inventory (hostile): escaped (metric_label)."""
    return [metric_label(v) for v in values]


def _gauge(name: str, doc: str, labels: tuple[str, ...] = ("host",)) -> GaugeMetricFamily:
    return GaugeMetricFamily(f"rollout_{name}", doc, labels=list(labels))


def _states(row: dict[str, Any]) -> tuple[str, ...]:
    """STATES, and the row's own state should a newer rollout name one this does not know."""
    state = str(row.get("state"))
    return STATES if state in STATES else (*STATES, state)


class StatusCollector(Collector):
    """The rows of `rollout status --json` as metrics, one series per host."""

    def __init__(self, rows: list[dict[str, Any]], now: float) -> None:
        self.rows = rows
        self.now = now

    def collect(self) -> Iterator[Family]:
        up = _gauge("host_up", "1 when the host answered over SSH")
        serving = _gauge("daemon_serving", "1 when the daemon runs and is not held")
        state = _gauge("daemon_state", "1 for the daemon's current state, 0 for every other "
                       "state (" + ", ".join(STATES) + ")", ("host", "state"))
        info = InfoMetricFamily("rollout_release", "the release current on the host (value "
                                "always 1)", labels=["host"])
        restarts = CounterMetricFamily(
            "rollout_daemon_restarts", "daemon exits rollout did not ask for (each one a "
            "restart by the supervisor) since the host's exits.jsonl began", labels=["host"])
        hour = _gauge("daemon_restarts_last_hour", "daemon restarts in the last hour")
        uptime = _gauge("daemon_uptime_seconds", "seconds since the daemon started")
        used = _gauge("memory_used_bytes", "memory charged to the host's cgroup")
        limit = _gauge("memory_limit_bytes", "the host's cgroup memory limit")
        last_exit = _gauge("daemon_last_exit_timestamp_seconds",
                           "when the daemon last exited (unix time), how (its signal, exit code, "
                           "or unrecorded: then the supervisor's last heartbeat before it) and "
                           "the cause rollout names for that same exit", ("host", "cause", "how"))
        for row in self.rows:
            host = metric_label(row.get("host"))
            up.add_metric([host], 0.0 if row.get("state") == "unreachable" else 1.0)
            serving.add_metric([host], 1.0 if row.get("serving") else 0.0)
            for name in _states(row):
                state.add_metric(_labels(host, name), 1.0 if row.get("state") == name else 0.0)
            if row.get("release"):
                info.add_metric([host], {"release": metric_label(row["release"]),
                                         "version": metric_label(row.get("version") or "")})
            for family, key in ((restarts, "restarts_total"), (hour, "restarts_last_hour"),
                                (uptime, "uptime_secs"), (used, "memory_used"),
                                (limit, "memory_limit")):
                value = _number(row.get(key))
                if value is not None:
                    family.add_metric([host], value)
            self._last_exit(last_exit, host, row)
        yield from (up, serving, state, info, restarts, hour, uptime, used, limit, last_exit)
        yield from self._fleet()

    def _last_exit(self, family: GaugeMetricFamily, host: str, row: dict[str, Any]) -> None:
        """One series, its labels from the one exit the row describes (commands/status.py)."""
        when = _number((row.get("last_exit") or {}).get("time"))
        if not isinstance(row.get("last_exit"), dict) or when is None:
            return
        family.add_metric(_labels(host, row.get("last_exit_cause") or "unknown",
                                  row.get("last_exit_how") or "unknown"), when)

    def _fleet(self) -> Iterator[GaugeMetricFamily]:
        hosts = GaugeMetricFamily("rollout_fleet_hosts", "hosts in the inventory selection")
        hosts.add_metric([], float(len(self.rows)))
        serving = GaugeMetricFamily("rollout_fleet_serving_hosts", "hosts whose daemon serves")
        serving.add_metric([], float(sum(1 for r in self.rows if r.get("serving"))))
        stamp = GaugeMetricFamily("rollout_status_timestamp_seconds", "when the status was read")
        stamp.add_metric([], self.now)
        yield from (hosts, serving, stamp)


def registry(rows: list[dict[str, Any]], now: float) -> CollectorRegistry:
    reg = CollectorRegistry(auto_describe=False)
    reg.register(StatusCollector(rows, now))
    return reg


def render(rows: list[dict[str, Any]], now: float) -> str:
    return generate_latest(registry(rows, now)).decode("utf-8")


def write(path: Path, rows: list[dict[str, Any]], now: float) -> None:
    """Write the metrics to `path` through a temporary file and a rename, never through a
    link; 0644: the metrics hold no secret, and node_exporter reads them as its own user."""
    write_atomic(path, render(rows, now), mode=0o644)
