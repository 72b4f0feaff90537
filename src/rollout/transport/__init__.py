"""One small transport interface: run, put, get."""

from rollout.transport.base import RunResult, Transport

__all__ = ["RunResult", "Transport"]
