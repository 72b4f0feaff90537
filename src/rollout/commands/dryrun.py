"""--dry-run: read facts, print each host's plan, change nothing on any host.

The plan printed is the one the engine would apply (rollout.engine.hostplan): the same decisions
from the same facts, and the rollback for each point where a host can fail.

On the controller it only reads, and never the build context's files (only their names and
sizes): an image an earlier build made from this very context gives the release id (its
executables are copied out to the local cache); otherwise the plan says a build would come
first and the upload cannot be checked yet.
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from rollout.engine.hostplan import PlannedStep, digest_paths, plan_gathered
from rollout.engine.plan import Plan
from rollout.engine.run import RunSummary
from rollout.errors import RolloutError, StepFailed
from rollout.host.facts import HostFacts
from rollout.host.layout import Layout
from rollout.masking import head
from rollout.output.events import EventBus, JsonLinesSink, open_private
from rollout.steps import image
from rollout.steps.base import HostContext
from rollout.steps.decision import Call, Release, Skip, without_env
from rollout.transport.base import Transport
from rollout.units import format_size


def host_summary(facts: HostFacts) -> str:
    return (
        f"release {facts.current_release or 'none'}, daemon {facts.daemon.state}, memory "
        f"{format_size(facts.memory.usage)} of {format_size(facts.memory.limit)}"
    )


def known_release(plan: Plan, cache_dir: Any) -> Release | None:
    spec = plan.playbook.build
    ctx = image.ControllerContext(spec, plan.version, cache_dir)
    try:
        ctx.image = image.existing_image(ctx)
    except StepFailed as e:
        print(f"  controller: build: would fail to build {spec.tag} "
              f"({Path(spec.dockerfile).name}): {e}")
        return None
    if ctx.image is None:
        print(f"  controller: build: would build {spec.tag} ({Path(spec.dockerfile).name}): "
              f"{image.context_summary(spec)}; its content is not read in a dry run")
        return None
    image.extract(ctx, {})
    assert ctx.release is not None
    print(f"  controller: build: image {ctx.image} exists; release {ctx.release.id}")
    return ctx.release


def describe(step: PlannedStep) -> list[str]:
    """The lines a dry run prints for one planned step: its decision, and its rollback."""
    name = f"    {step.spec.name} ({step.kind})"
    decision = step.decision
    if isinstance(decision, Skip):
        return [f"{name} would skip: {decision.reason}"]
    if decision.fails:
        lines = [f"{name} would run and FAIL: {decision.fails}"]
    else:
        lines = [f"{name} would run: {decision.summary}"]
        lines += [f"      calls: {call_line(c)}" for c in decision.calls]
    if step.rollback is not None:
        lines.append(f"      if it fails: {step.rollback.describe()}")
    return lines


def planned(step: PlannedStep) -> dict[str, Any]:
    """A planned step as data: status skip, run or fail, why, its kind and its calls."""
    decision = step.decision
    data: dict[str, Any] = {"kind": str(step.kind)}
    if isinstance(decision, Skip):
        return {"status": "skip", "reason": decision.reason, "data": {**data, "calls": []}}
    calls = [] if decision.fails else [c.as_record() for c in decision.calls]
    return {"status": "fail" if decision.fails else "run",
            "reason": decision.fails or decision.summary, "data": {**data, "calls": calls}}


VALUE_CHARS = 80  # each argument's repr, cut


def call_line(call: Call) -> str:
    """One host call as the dry run prints it: stop(root='/data', signal='SIGTERM', ...).
    Known secrets are masked, validate.env's values never shown, each value cut."""
    args = []
    for key, value in call.kwargs.items():
        if isinstance(value, str):
            value = without_env(value)
        text = head(repr(value), VALUE_CHARS + 1)
        args.append(f"{key}={text[:VALUE_CHARS]}{'...' if len(text) > VALUE_CHARS else ''}")
    return f"{call.name}({', '.join(args)})"


@dataclass
class DryRun(RunSummary):
    """A dry run's result: exit 1 when a host could not be planned (unreachable, its facts
    unreadable), else 0; nothing was changed either way."""

    unplanned: dict[str, str] = field(default_factory=dict)  # host -> why

    @property
    def exit_code(self) -> int:
        return 1 if self.unplanned else 0


def dry_run(
    plan: Plan, connect: Callable[[Any], Transport], cache_dir: Any, given: Release | None = None,
    json_path: str | None = None,
) -> DryRun:
    """The plan printed; with `json_path` also as JSON lines there (a planned_step event per
    step, with its calls; '-': on stdout, the text then on stderr)."""
    bus = EventBus(plan.run_id)
    with contextlib.ExitStack() as stack:
        if json_path == "-":
            bus.subscribe(JsonLinesSink(sys.stdout))
            stack.enter_context(contextlib.redirect_stdout(sys.stderr))
        elif json_path is not None:
            bus.subscribe(JsonLinesSink(stack.enter_context(open_private(Path(json_path)))))
        return _dry_run(plan, connect, cache_dir, given, bus)


def _dry_run(plan: Plan, connect: Callable[[Any], Transport], cache_dir: Any,
             given: Release | None, bus: EventBus) -> DryRun:
    print(f"plan {plan.run_id}: version {plan.version or '-'}, batches {plan.batches}")
    if given is not None:
        print(f"  controller: release {given.id} from a bundle: nothing to build")
    unplanned = print_host_plans(plan, connect, given or known_release(plan, cache_dir), bus)
    if unplanned:
        print(f"not planned: {len(unplanned)} of {len(plan.host_names) + len(plan.refused)} "
              "host(s): "
              f"{', '.join(unplanned)}")
    return DryRun(plan.run_id, {}, dry_run=True, unplanned=unplanned)


def print_host_plans(
    plan: Plan, connect: Callable[[Any], Transport], release: Release | None,
    bus: EventBus | None = None,
) -> dict[str, str]:
    """Each host's facts and plan (each step also a planned_step event on `bus`); `release`
    None: a build would come first. Returns the hosts that could not be planned, with why."""
    emit = bus.emit if bus is not None else lambda *_a, **_k: None
    unplanned: dict[str, str] = {}
    for name, why in plan.refused.items():
        print(f"  {name}: REFUSED: {why}")
        unplanned[name] = f"refused: {why}"
        emit("unplanned", host=name, reason=unplanned[name])
    for name in plan.host_names:
        try:
            transport = connect(plan.host(name))
        except RolloutError as e:
            print(f"  {name}: UNREACHABLE: {e}")
            unplanned[name] = f"unreachable: {e}"
            emit("unplanned", host=name, reason=unplanned[name])
            continue
        try:
            ctx = HostContext(
                host=plan.host(name),
                transport=transport,
                layout=Layout(plan.root),
                settings=plan.settings_for(name),
                release=release,
            )
            target = replace(ctx.target, pending=release is None)
            facts = ctx.facts(*digest_paths(target))
            print(f"  {name}: {host_summary(facts)}")
            for step in plan_gathered(ctx, plan.host_steps, facts, target=target).steps:
                print("\n".join(describe(step)))
                emit("planned_step", host=name, step=step.spec.name, **planned(step))
        except RolloutError as e:  # the facts could not be read: no plan for this host
            print(f"  {name}: NOT PLANNED: {e}")
            unplanned[name] = str(e)
            emit("unplanned", host=name, reason=unplanned[name])
        finally:
            transport.close()
    return unplanned
