"""The `work` section: what happens to the proofs a daemon is running before its stop
(issue 17, a busy prover): the cordon and uncordon commands, the deadline for the work in
flight, how often the wait reports, and the choice at the deadline."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from .durations import Seconds
from .sections import COMMAND_HELP, CommandField, Section

AtDeadline = Literal["skip", "stop"]


class WorkSpec(Section):
    """Work in flight before a stop: cordon the host (no new work is scheduled on it), wait
    until the daemon's /status shows no job in flight and an empty queue, then stop; a
    host is never left cordoned (uncordoned after validation, a rollback, a failure, a skip,
    and by the host's guard when the controller dies)."""

    cordon: CommandField | None = Field(
        default=None,
        description="Command run on the host before the wait (runtime template), e.g. "
        "`curio cordon`: no new work is scheduled on the host; null: none." + COMMAND_HELP,
    )
    uncordon: CommandField | None = Field(
        default=None,
        description="Command that undoes the cordon (runtime template), e.g. "
        "`curio uncordon`; required with `cordon`." + COMMAND_HELP,
    )
    deadline: Seconds = Field(
        default=600,
        ge=0,
        description="Seconds to wait for the jobs in flight and the queue to end before the "
        "stop; then `at_deadline` decides. 0: never wait (the choice is made at once).",
    )
    interval: Seconds = Field(
        default=30, gt=0, description="Seconds between the wait's reports of the jobs in flight."
    )
    at_deadline: AtDeadline = Field(
        default="skip",
        description="At the deadline, jobs still in flight: `skip` (the host is left "
        "untouched and uncordoned, reported as skipped because busy; the run goes on with "
        "the others) or `stop` (stop anyway: the proofs abandoned are named in the stop's "
        "result and the events).",
    )
    command_timeout: Seconds = Field(
        default=60, gt=0, description="Seconds the cordon or uncordon command may run."
    )
    settle: Seconds = Field(
        default=1, ge=0,
        description="After the cordon, the daemon must be seen idle twice this many seconds "
        "apart before the stop: a task the scheduler assigned just before the cordon may "
        "reach the daemon a moment later.",
    )

    @model_validator(mode="after")
    def _uncordon_with_cordon(self) -> WorkSpec:
        if self.cordon is not None and self.uncordon is None:
            raise ValueError("work.cordon needs work.uncordon: a host is never left cordoned")
        return self
