"""rollout's host API: every action that changes the daemon's host, written once.

Each action is a function that takes keyword arguments (JSON data, never code) and returns
a JSON-able report: "outcome" (one word) and "reason" (what it did, or why it did nothing:
each action checks before it acts). The controller's steps call them through the host's
agent ({"call": "ops.stop", "kwargs": {...}}) or, without an agent, as

    python3 -c BOOTSTRAP --call stop --kwargs-stdin   (stdin: this script, sized; the kwargs)

and the guard calls the same functions when it takes over. One JSON line is printed: the
report. Every path under the root is opened through common.py's safe_* helpers (a link
planted there is refused, never followed). Standard library only; python3 >= 3.9.

The actions live by family in actions/ (script_text() inlines them here, so a host still
gets one file); each declares its arguments, checked before it runs ("bad-call" where they
do not fit), and its report's keys and outcome words: ops.SPECS (actions/spec.py).
"""

from __future__ import annotations

import json
import sys
from typing import Any

# ruff: noqa: E501, F401
# isort: off
from rollout.host.scripts.actions.spec import DECLARED, IN_AGENT, WARMS, action, misfit, spec_of  # inlined on hosts
from rollout.host.scripts.actions.base import POLL, STOPPED, _release_id_ok, _report  # inlined on hosts
from rollout.host.scripts.actions.hold import drain, drain_figures, hold, release_hold, serving, stop  # inlined on hosts
from rollout.host.scripts.actions.current import current_release, point_current, pointed, restore_config  # inlined on hosts
from rollout.host.scripts.actions.daemon import UNIT, forget_validated, log_tail, owners, register, run_supervisor, start, strangers, wait_ready  # inlined on hosts
from rollout.host.scripts.actions.proving import ACTIVE, BUDGET_POLL, BUDGET_SETTLE, budget_waiting, executable_problem, job_ids, prove  # inlined on hosts
from rollout.host.scripts.actions.folders import MAX_NAMES, config_folders, file_sums, identities, make_folder, remove_files  # inlined on hosts
from rollout.host.scripts.actions.release import install_release, prune, pull_folder, read_release, remove_partial, staging_survey, unstage  # inlined on hosts
from rollout.host.scripts.actions.reads import c1_probe, cpu_info, file_present, gpus, input_check, ldd, params_probe, pce_sizes, probe, stage_input  # inlined on hosts
from rollout.host.scripts.actions.lock import lock  # inlined on hosts
from rollout.host.scripts.actions.files import check_root, copy_file, write_file  # inlined on hosts
from rollout.host.scripts.actions.facts import facts  # inlined on hosts
from rollout.host.scripts.actions.work import cordon, cordoned, jobs_in_flight, uncordon, user_command, work  # inlined on hosts
# isort: on


# ---------------------------------------------------------------- several reads, one round trip


@action("calls:[any]", "reports:[obj?]", "batch")
def batch(calls: list[Any]) -> dict[str, Any]:
    """Several host actions in one round trip, in order (the reads a step makes together,
    such as preflight's): each one's report, or None for an entry that is not a call or
    whose action raised (the controller then makes that call on its own)."""
    reports: list[Any] = []
    for entry in calls if isinstance(calls, list) else []:
        name = entry_name(entry)
        if name is None or name == "batch":
            reports.append(None)
            continue
        try:
            reports.append(call(name, entry.get("kwargs")))
        except Exception:  # noqa: BLE001 - that call alone, made again on its own
            reports.append(None)
    return _report("batch", f"{len(reports)} call(s)", reports=reports)


def entry_name(entry: Any) -> str | None:
    """A batch entry's action name; None where the entry is not a call."""
    name = entry.get("call") if isinstance(entry, dict) else None
    return name if isinstance(name, str) else None


def batch_names(kwargs: Any) -> list[str | None] | None:
    """Each entry's action name (entry_name) in a batch call's keyword arguments; None
    where they hold no list of calls."""
    calls = kwargs.get("calls") if isinstance(kwargs, dict) else None
    return [entry_name(c) for c in calls] if isinstance(calls, list) else None


ACTIONS = {name: declared[0] for name, declared in DECLARED.items()}
"""Every host action: each function its family module declares with @action (a new action
is its function and its declaration, in its family's module; no list here to extend)."""


def __getattr__(name: str) -> Any:
    """ops.SPECS: every action's declaration as data, built when the controller asks (the
    text a host runs never builds it: each forked call would pay for all 43)."""
    if name == "SPECS":
        return {action: spec_of(action) for action in ACTIONS}
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def in_agent(action: str, kwargs: Any) -> bool:
    """Whether the host's agent may run this call in its own process, without a fork: an
    action declared in_agent (spec.IN_AGENT), or a batch of those alone."""
    if action != "batch":
        return action in IN_AGENT
    names = batch_names(kwargs)
    return names is not None and all(n is not None and n in IN_AGENT for n in names)


def warms(action: str, kwargs: Any) -> list[str]:
    """The modules the agent imports before it forks this call (spec.WARMS; a batch's: its
    calls')."""
    if action != "batch":
        return list(WARMS.get(action, ()))
    return sorted({m for n in batch_names(kwargs) or [] if n for m in WARMS.get(n, ())})


def call(action: str, kwargs: Any) -> dict[str, Any]:
    """Run one action; an unknown action or arguments that do not fit it: "bad-call"."""
    fn = ACTIONS.get(action)
    if fn is None:
        return _report("bad-call", f"no host action {action[:80]!r}")
    if not isinstance(kwargs, dict) or not all(isinstance(k, str) for k in kwargs):
        return _report("bad-call", "keyword arguments must be a JSON object")
    why = misfit(fn, kwargs)
    if why is not None:
        return _report("bad-call", f"{action}: {why}")
    report: dict[str, Any] = fn(**kwargs)
    return report


def main(argv: list[str]) -> int:
    import argparse  # here: the agent never runs main(), and each fork would pay for it

    p = argparse.ArgumentParser(description="run one host action (rollout's host API)")
    p.add_argument("--call", required=True, choices=sorted(ACTIONS))
    p.add_argument("--kwargs", default=None, help="its keyword arguments, a JSON object")
    p.add_argument("--kwargs-stdin", action="store_true", help="read them from stdin")
    args = p.parse_args(argv)
    text = sys.stdin.read() if args.kwargs_stdin else (args.kwargs or "{}")
    try:
        kwargs = json.loads(text or "{}")
    except ValueError:
        kwargs = None
    print(json.dumps(call(args.call, kwargs), sort_keys=True, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
