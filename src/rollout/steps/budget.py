"""The daemon's memory budget: one rule, decided on the controller from the host's facts.

The config step writes the figure, preflight refuses a host the rule refuses, the drain
step and the guard's recipe hand the figure to the host as data (the host never works it
out again). The rule, from the container's cgroup limit (v1 or v2, as the host reports it)
and the playbook's daemon.total_budget, daemon.safety_margin and preflight.min_budget:

- total_budget "cgroup": the limit minus the safety margin. A host that shows no cgroup
  limit is refused, naming daemon.total_budget: MemTotal inside a container is the
  machine's RAM, not the container's, so it is never used (issue 17).
- total_budget a size: that size, which must fit under the limit minus the margin where
  the host shows a limit; where it shows none, the setting is taken as it is, and said so.
- Either way, a budget below preflight.min_budget is refused, naming both numbers, and so is
  one under 1 MiB (the config says it in whole MiB: it would read 0MiB).

A limit the host reports that is not a positive number of bytes below HUGE_LIMIT (a
negative or zero figure, a string, a boolean, cgroup v1's "no limit" of about 2**63) counts
as no visible limit.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from rollout.host.facts import MemoryFacts
from rollout.host.scripts.common import HUGE_LIMIT
from rollout.units import format_size, parse_size

CGROUP = "cgroup"
MIB = 1 << 20  # the config says the budget in whole MiB


@dataclass(frozen=True)
class BudgetRule:
    """The settings the rule reads (daemon.total_budget, daemon.safety_margin,
    preflight.min_budget), as the playbook validated them."""

    total_budget: str
    safety_margin: str
    min_budget: str = "0"

    @classmethod
    def of(cls, settings: Any) -> BudgetRule:
        """From a rendered playbook (min_budget "0" where it has no preflight section)."""
        daemon = settings.daemon
        preflight = getattr(settings, "preflight", None)
        minimum = getattr(preflight, "min_budget", None)
        return cls(str(daemon.total_budget), str(daemon.safety_margin),
                   str(minimum) if minimum is not None else "0")


@dataclass(frozen=True)
class Budget:
    """What the rule decided for one host.

    size: bytes the daemon may use (what the config step writes and the drain waits for);
    None where it cannot be sized. limit: the cgroup limit it was held against, None where
    the host shows none. refusal: why preflight refuses the host, None where it fits.
    """

    size: int | None
    limit: int | None
    refusal: str | None = None

    @property
    def text(self) -> str:
        """The size as the daemon's config says it: whole MiB."""
        return f"{(self.size or 0) // 1024**2}MiB"

    def note(self) -> str:
        """Preflight's note for a budget that fits."""
        if self.limit is None:
            return (f"budget {format_size(self.size)} as set (daemon.total_budget; "
                    "the host shows no cgroup memory limit to hold it against)")
        return f"budget {format_size(self.size)} fits"


def visible_limit(memory: MemoryFacts) -> int | None:
    """The container's cgroup memory limit in bytes, or None where the host shows none."""
    limit = memory.limit
    if not isinstance(limit, int) or isinstance(limit, bool):
        return None
    return limit if 0 < limit < HUGE_LIMIT else None


def no_limit_refusal(memory: MemoryFacts) -> str:
    if memory.limit is not None:
        seen = f"it reports {memory.limit} bytes"
    else:
        seen = f"{memory.source}: none set" if memory.source else "no memory cgroup found"
    return (
        f"the host shows no cgroup memory limit ({seen}), so daemon.total_budget \"cgroup\" "
        "cannot be sized: set daemon.total_budget to the daemon's budget (a size such as "
        "400GiB); the host's RAM (MemTotal) is never used for it"
    )


def _margin_refusal(rule: BudgetRule, limit: int) -> str:
    return (f"safety margin {rule.safety_margin} leaves no memory under the limit "
            f"{format_size(limit)}")


def sized(memory: MemoryFacts, rule: BudgetRule) -> Budget:
    """The budget's size, before the minimum: total_budget, or the limit minus the margin."""
    limit = visible_limit(memory)
    room = None if limit is None else limit - parse_size(rule.safety_margin)
    if rule.total_budget != CGROUP:
        size = parse_size(rule.total_budget)
        if limit is None or room is None:
            return Budget(size, None)
        if room <= 0:
            return Budget(size, limit, _margin_refusal(rule, limit))
        if size > room:
            return Budget(size, limit, f"total_budget {rule.total_budget} exceeds the cgroup "
                                       f"limit minus the safety margin ({format_size(room)})")
        return Budget(size, limit)
    if limit is None or room is None:
        return Budget(None, None, no_limit_refusal(memory))
    if room <= 0:
        return Budget(None, limit, _margin_refusal(rule, limit))
    return Budget(room, limit)


def decide_budget(memory: MemoryFacts, rule: BudgetRule) -> Budget:
    """The rule in full: the size, and preflight's refusal (the minimum included)."""
    budget = sized(memory, rule)
    if budget.refusal is not None or budget.size is None:
        return budget
    if budget.size < MIB:
        return Budget(budget.size, budget.limit, (
            f"memory budget {budget.size} bytes is under 1 MiB: the daemon's config says it "
            "in whole MiB, so it would read 0MiB (raise the limit or daemon.total_budget)"
        ))
    minimum = parse_size(rule.min_budget)
    if budget.size < minimum:
        return Budget(budget.size, budget.limit, (
            f"memory budget {format_size(budget.size)} ({budget.size} bytes) is below the "
            f"minimum {format_size(minimum)} ({minimum} bytes) the proof needs "
            "(preflight.min_budget)"
        ))
    return budget
