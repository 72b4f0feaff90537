"""The config layer: inventory and playbook files -> validated, plain data. No I/O
beyond reading the files; errors are ConfigError naming the file, line and key."""

from __future__ import annotations

from .batches import batch_size, batches, max_fail_exceeded, parse_serial
from .inventory import Host, Inventory, load_inventory
from .playbook import (
    DEFAULT_PLAYBOOK,
    RUNTIME_TEMPLATES,
    Playbook,
    load_playbook,
    parse_set_options,
)
from .render import evaluate_condition, render_runtime
from .sections import parse_size
from .steps import FailureClass, RetryPolicy, StepKind, StepSpec

__all__ = [
    "DEFAULT_PLAYBOOK",
    "RUNTIME_TEMPLATES",
    "FailureClass",
    "Host",
    "Inventory",
    "Playbook",
    "RetryPolicy",
    "StepKind",
    "StepSpec",
    "batch_size",
    "batches",
    "evaluate_condition",
    "load_inventory",
    "load_playbook",
    "max_fail_exceeded",
    "parse_serial",
    "parse_set_options",
    "parse_size",
    "render_runtime",
]
