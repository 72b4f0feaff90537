"""`rollout status --prom FILE`: the fleet status as Prometheus text-format metrics, for
node_exporter's textfile collector (which reads *.prom files; the file is replaced
atomically, so it never reads half of one)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

from prometheus_client import CollectorRegistry, generate_latest, write_to_textfile
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

STATES = ("running", "zombie", "stopped", "held", "crash-looping", "unreachable")


def _number(value: Any) -> float | None:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def _gauge(name: str, doc: str, labels: tuple[str, ...] = ("host",)) -> GaugeMetricFamily:
    return GaugeMetricFamily(f"rollout_{name}", doc, labels=list(labels))


class StatusCollector(Collector):
    """The rows of `rollout status --json` as gauges, one series per host."""

    def __init__(self, rows: list[dict[str, Any]], now: float) -> None:
        self.rows = rows
        self.now = now

    def collect(self) -> Iterator[GaugeMetricFamily]:
        up = _gauge("host_up", "1 when the host answered over SSH")
        serving = _gauge("daemon_serving", "1 when the daemon runs and is not held")
        state = _gauge("daemon_state", "1 for the daemon's current state", ("host", "state"))
        restarts = _gauge("daemon_restarts_last_hour", "daemon restarts in the last hour")
        uptime = _gauge("daemon_uptime_seconds", "seconds since the daemon started")
        used = _gauge("memory_used_bytes", "memory charged to the host's cgroup")
        limit = _gauge("memory_limit_bytes", "the host's cgroup memory limit")
        last_exit = _gauge("daemon_last_exit_timestamp_seconds",
                           "when the daemon last exited, with the cause rollout names",
                           ("host", "cause", "how"))
        for row in self.rows:
            host = str(row.get("host"))
            up.add_metric([host], 0.0 if row.get("state") == "unreachable" else 1.0)
            serving.add_metric([host], 1.0 if row.get("serving") else 0.0)
            for name in STATES:
                state.add_metric([host, name], 1.0 if row.get("state") == name else 0.0)
            for family, key in ((restarts, "restarts_last_hour"), (uptime, "uptime_secs"),
                                (used, "memory_used"), (limit, "memory_limit")):
                value = _number(row.get(key))
                if value is not None:
                    family.add_metric([host], value)
            self._last_exit(last_exit, host, row)
        yield from (up, serving, state, restarts, uptime, used, limit, last_exit)
        yield from self._fleet()

    def _last_exit(self, family: GaugeMetricFamily, host: str, row: dict[str, Any]) -> None:
        rec = row.get("last_exit")
        if not isinstance(rec, dict):
            return
        how = str(rec.get("signal") or f"code {rec.get('exit_code')}")
        family.add_metric([host, str(row.get("last_exit_cause") or "unknown"), how],
                          _number(rec.get("time")) or 0.0)

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
    """Write the metrics to `path` through a temporary file and a rename."""
    path.parent.mkdir(parents=True, exist_ok=True)
    write_to_textfile(str(path), registry(rows, now))
