"""The host's guard, seen from the controller (the host side: rollout/host/scripts/guard.py).

For a plan that stops, switches or starts something, the controller starts the guard ahead
(while upload and preflight run), on a channel of its own, with a recipe (plain data): how
to go back to the previous release and validate it there. Started, it is inert: a tether
that drops then makes it exit doing nothing. Right before the host's first change (its
first stop, switch or start) the controller arms it (`arm PHASE`) and waits for its answer;
from then on the channel is the tether. The controller tells the guard each phase the host
reaches and, when it is done with the host (validated, or its own rollback done), that the
host is settled. A tether that drops before that is a hand-over: the guard takes the host
back to a validated release by itself, only while the host lock names its run, and the
controller sends that host no further command (nor gives back that host's lock).

Every command that touches a host first waits for any guard still at it there, and shows
what guards did that no command showed yet (`guards_left`).
"""

from __future__ import annotations

import json
import shlex
from dataclasses import dataclass, field
from typing import Any

from rollout.engine.hostplan import LOST, PHASE_AT_START, HostPlan
from rollout.errors import HandedOver, RolloutError, StepFailed
from rollout.host.scripts import bootstrap, script_text, sized
from rollout.output.events import EventBus
from rollout.steps.base import HostContext
from rollout.steps.decision import Action, Phase
from rollout.steps.kinds import KINDS
from rollout.steps.work import work_how
from rollout.transport.base import Stream

BOOTSTRAP = bootstrap("guard.py")
ARM_WAIT = 600.0  # seconds an earlier guard's takeover may take before arming gives up
SETTLE_WAIT = 30.0  # seconds a guard started ahead, never armed, may take to start
ARMED_WAIT = 60.0  # seconds for the guard's answer to `arm`
LEFT_WAIT = 900.0  # seconds a command waits for a guard still taking over before it acts
CHANGED_PHASES = frozenset(PHASE_AT_START.values())
"""The phases a host enters as a change begins (its first stop, switch or start): the guard
is armed only on the way into one of them."""


def recipe(ctx: HostContext, plan: HostPlan, run_id: str) -> dict[str, Any]:
    """What the guard needs to take the host back by itself: data only, never code."""
    previous = plan.previous if plan.previous != ctx.target.release_id else None
    return {
        "run_id": run_id,
        "host": ctx.name,
        "root": ctx.layout.root,
        "release": ctx.target.release_id,
        "previous": previous,
        "rollback": rollback_recipe(plan),
        "uncordon": uncordon_call(ctx),
    }


def uncordon_call(ctx: HostContext) -> dict[str, Any] | None:
    """The host call that undoes this run's cordon (ops.uncordon, the user's own command
    rendered here): the guard makes it whatever its takeover's end, where rollout's record
    says the host is cordoned. None without a cordon command."""
    how = work_how(ctx.target, "")
    if not how.cordon:
        return None
    return {"call": "uncordon", "kwargs": {"root": ctx.layout.root, "command": how.uncordon,
                                           "timeout": how.timeout}}


def rollback_recipe(plan: HostPlan) -> dict[str, Any]:
    """The guard's plan for each phase the controller may be lost in, as plain data: the
    controller's own rollback (HostPlan.rollback_at), so that the guard has no decider of
    its own. Per phase: its steps in order, `to`, the outcome once they pass, whether that
    is a rollback to `to`, and each step's host calls, serialised from the controller's
    rollback actions (a failed drain is reported and the takeover goes on: `tolerate`)."""
    plans = {}
    for phase in Phase:
        back = plan.rollback_at(phase, LOST)
        steps = [{"step": kind, "calls": [c.as_json() for c in action.calls],
                  "tolerate": KINDS[kind].tolerated}
                 for kind, action in zip(back.kinds, back.actions, strict=True)]
        plans[phase.label] = {"steps": list(back.kinds), "to": back.to,
                              "outcome": back.outcome, "rolled_back": back.rolled_back,
                              "describe": back.describe(), "calls": steps}
    return plans


def arm_input(data: dict[str, Any]) -> bytes:
    """The guard's script and its recipe line, then ops.py's text (the host actions its
    steps call, the drain's included), each script after its length."""
    return (sized(script_text("guard")) + json.dumps(data).encode() + b"\n"
            + sized(script_text("ops")))


@dataclass
class HostGuard:
    """One host's tether, from arming to settled (or lost)."""

    run_id: str
    stream: Stream | None = None
    settled: bool = False
    phase: Phase = Phase.UNTOUCHED
    info: dict[str, Any] = field(default_factory=dict)
    pending: Stream | None = None  # started ahead, its answer not read yet

    @property
    def lost(self) -> bool:
        """The tether dropped before the controller settled the host: the guard has it."""
        return self.stream is not None and not self.settled and self.stream.ended

    def follow(self, ctx: HostContext, plan: HostPlan, phase: Phase) -> None:
        """Arm right before the host leaves untouched (with the phase it is entering); then
        tell the guard each phase. A host that reaches `validated` without leaving untouched
        (its daemon kept, validated again or on the evidence of an earlier validation) gets
        no guard: nothing was changed there for one to take back."""
        if phase is self.phase:
            return
        if self.stream is None and self.phase is Phase.UNTOUCHED:
            self.phase = phase
            if phase in CHANGED_PHASES:
                self._arm(ctx, plan, phase)
            return
        self.phase = phase
        if self.stream is not None:
            self.stream.write(f"phase {phase.label}\n")

    def prepare(self, ctx: HostContext, plan: HostPlan) -> None:
        """Start the guard ahead, while the host's first steps (upload, preflight) run: its
        start is then off the path to the stop. Only for a plan that stops, switches or
        starts something; its answer is read when the host is about to leave untouched."""
        if self.stream is None and self.pending is None and _touches(plan):
            self.pending = self._open(ctx, plan)

    def _open(self, ctx: HostContext, plan: HostPlan) -> Stream | None:
        command = f"python3 -c {shlex.quote(BOOTSTRAP)} --arm --wait {ARM_WAIT:g}"
        return ctx.transport.open_stream(command, arm_input(recipe(ctx, plan, self.run_id)))

    def _arm(self, ctx: HostContext, plan: HostPlan, phase: Phase) -> None:
        """The guard started (ahead, or now), then armed: only then may the host change."""
        ahead, self.pending = self.pending, None
        if ahead is not None and ahead.ended:  # its connection dropped since: a new one
            ahead.close()
            ahead = None
        stream = ahead or self._open(ctx, plan)
        if stream is None:
            return  # a transport without long-lived channels: no guard
        ready = _answer(stream, ARM_WAIT + 60, "ready")
        armed = ready if "reason" in ready else (
            _answer(stream, ARMED_WAIT, "armed") if stream.write(f"arm {phase.label}\n")
            else {"reason": "its channel closed"})
        if "reason" in armed:
            stream.close()
            raise StepFailed(f"the host's guard did not start ({armed['reason']}): "
                             "nothing was stopped", retryable=False)
        self.stream, self.info = stream, ready

    def handed_over(self) -> str:
        return (
            f"controller lost its tether to the host's guard in phase {self.phase.label}: "
            f"the guard takes the host back to a validated release by itself, and this run "
            f"sends it no further command; `rollout rollout --resume {self.run_id}` reports "
            "what it did"
        )

    def check(self) -> None:
        """Raise HandedOver once the guard has the host: no command may follow."""
        if self.lost:
            raise HandedOver(self.handed_over(), retryable=False)

    def settle(self) -> None:
        """The controller is done with the host: the guard exits without acting."""
        self._never_needed()
        if self.stream is not None and not self.lost:
            self.settled = self.stream.write("settled\n")
            self.stream.close()

    def drop(self) -> bool:
        """Close the tether; unless settled, the guard takes over (True: handed over)."""
        self._never_needed()
        if self.stream is not None and not self.settled:
            self.stream.close()
            return True
        return False

    def _never_needed(self) -> None:
        """A guard started ahead for a host that never left untouched: settled, as there
        is nothing to take back."""
        pending, self.pending = self.pending, None
        if pending is not None:  # its start read first: every guard started ends settled
            if not pending.ended:
                _answer(pending, SETTLE_WAIT, "ready")
            pending.write("settled\n")
            pending.close()


def _answer(stream: Stream, seconds: float, key: str) -> dict[str, Any]:
    """The guard's answer line when `key` is true in it; else {"reason": why not}."""
    line = stream.readline(seconds)
    try:
        answer = json.loads(line) if line else {}
    except ValueError:
        answer = {}
    if isinstance(answer, dict) and answer.get(key) is True:
        return {k: v for k, v in answer.items() if k != "reason"}
    why = answer.get("reason") if isinstance(answer, dict) else None
    return {"reason": str(why or line.strip()[:200] or "no answer")}


def _touches(plan: HostPlan) -> bool:
    """Whether a host plan stops, switches or starts anything (its host leaves untouched)."""
    return any(isinstance(s.decision, Action) and not s.decision.fails
               and s.kind in PHASE_AT_START for s in plan.steps)


def guards_left(ctx: HostContext, bus: EventBus, run_id: str, mark: bool = True,
                wait: float = LEFT_WAIT) -> None:
    """Before a command touches the host: wait (bounded, saying so) for any guard still at
    it, then show what the guards that acted there did, once (`mark`), as guard_report
    events. StepFailed when a guard is still at it after `wait`: the host is not touched."""
    out = _left(ctx, 0.0, mark)
    busy = [_text(r, 128) for r in _list(out.get("busy"))]
    if busy and wait > 0:
        bus.emit("note", host=ctx.name, reason=f"waiting up to {wait:g}s for the guard(s) of "
                 f"run(s) {', '.join(busy)} still at the host")
        out = _left(ctx, wait, mark)
        busy = [_text(r, 128) for r in _list(out.get("busy"))]
    for reason, summary in _reports(out, run_id):
        bus.emit("guard_report", host=ctx.name, status=summary["status"], reason=reason,
                 data=summary)
    if busy:
        raise StepFailed(f"the guard(s) of run(s) {', '.join(busy)} still at the host after "
                         f"{wait:g}s: not touched", retryable=False)


def left_lines(ctx: HostContext) -> list[str]:
    """What the guards that acted on the host did, not yet shown by a run (`status`): read
    only, no wait; none when the host cannot say."""
    try:
        out = _left(ctx, 0.0, mark=False)
    except RolloutError:
        return []
    return [reason for reason, _ in _reports(out, None)]  # a takeover under way: pending


def _reports(out: dict[str, Any], run_id: str | None) -> list[tuple[str, dict[str, Any]]]:
    """(the console's line, the summary) per guard that acted, from the host's answer;
    the line names the guard's run unless it is `run_id`'s own."""
    found = []
    for run in _list(out.get("runs")):
        if not isinstance(run, dict):
            continue
        name = _text(run.get("run"), 128)
        for summary in summarize(run):
            prefix = f"guard of run {name}: " if name != run_id else ""
            found.append((prefix + summary["reason"], {**summary, "run": name}))
    return found


def _left(ctx: HostContext, wait: float, mark: bool) -> dict[str, Any]:
    args = ["--left", "--root", ctx.layout.root, "--wait", wait, *(["--mark"] if mark else [])]
    _, out = ctx.script("guard", *args, timeout=wait + 60)
    return out if isinstance(out, dict) else {}


def summarize(report: dict[str, Any]) -> list[dict[str, Any]]:
    """One summary per guard that acted (settled guards, and guards never armed, did
    nothing, and say nothing). The report is the host's answer: hostile data."""
    events = [e for e in _list(report.get("events")) if isinstance(e, dict)]
    found = []
    for state in _list(report.get("guards")):
        if not isinstance(state, dict) or state.get("settled") or state.get("ended") == "inert":
            continue
        mine = [e for e in events if _dict(e.get("data")).get("guard") == state.get("guard")]
        found.append(_summary(state, mine))
    return found


def _list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def _dict(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _text(value: Any, limit: int = 1000) -> str:
    return str(value)[:limit]


def _summary(state: dict[str, Any], events: list[dict[str, Any]]) -> dict[str, Any]:
    phase = _text(state.get("phase") or "untouched", 40)
    end = next((e for e in events if e.get("kind") in ("guard_end", "guard_exit")), None)
    data = _dict((end or {}).get("data"))
    base = {"phase": phase, "guard": state.get("guard"), "events": events}
    if end is None:
        return {**base, "status": "pending",
                "reason": f"controller lost in phase {phase}; the host's guard has not ended"}
    release = _text(data.get("release"), 200) if data.get("release") is not None else None
    status, why = _text(end.get("status"), 40), _text(end.get("reason"))
    if end.get("kind") == "guard_exit":
        what = f"did not act: {why}"
    elif status == "yielded":
        what = f"yielded the host to another run: {why}"
    elif status == "held":
        what = f"stopped the daemon: {why}"
    elif status != "validated":
        what = f"FAILED: {why}; current -> {release}"
    elif data.get("rolled_back"):
        what = f"rolled back to {release}, validated"
    elif data.get("acted"):
        what = f"kept {release}, validated"
    else:
        what = f"did nothing: {why}"
    failed = _dict(data.get("failed_steps"))
    if failed:
        what += "; " + "; ".join(f"{_text(k, 40)} failed: {_text(v)}" for k, v in failed.items())
    return {**base, "status": status, "release": release,
            "reason": f"controller lost in phase {phase}; the host's guard {what}"}
