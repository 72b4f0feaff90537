"""The `work` section: what happens to the proofs a daemon is running before its stop
(issue 17, a busy prover): the cordon and uncordon commands, the deadline for the work in
flight, how often the wait reports, and the choice at the deadline."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from .durations import Seconds
from .sections import COMMAND_HELP, CommandField, Section

AtDeadline = Literal["skip", "stop"]
OnStuck = Literal["roll", "skip"]


class WorkSpec(Section):
    """Work in flight before a stop: cordon the host (no new work is scheduled on it), wait
    until no signal of the daemon shows work in flight (its /status, its GetStatus through
    `bench`, its working memory above the SRS and PCE) or only stuck jobs, then stop; a
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
        "stop; then `at_deadline` decides. A daemon that runs and answers none of its signals "
        "is waited on the same way (its work is unknown, never taken for idle). 0: never "
        "wait (the choice is made at once). The stop looks once more right before its "
        "signal, in the same host call: a job that arrived since the wait's last look is "
        "not killed but waited for, within this same deadline. `rollout stop`, `rollout "
        "drain` and `rollout rollback` wait the same way; a run's own rollback and the "
        "guard's stop at once (the daemon failed its checks), naming the jobs they abandon.",
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
    stuck_after: Seconds = Field(
        default=300, gt=0,
        description="Seconds a job may show no progress (no partition of it moves a stage: "
        "none synthesised, none proved on the GPU, none done) before the wait calls it "
        "stuck; counted from the wait's first look at it. cuzk leaves a job whose GPU "
        "partition failed in /status for the daemon's life: it never ends by itself. A "
        "stuck job is named with its id and age in the stop's result and a `work` event.",
    )
    on_stuck: OnStuck = Field(
        default="roll",
        description="A host whose daemon holds a stuck job: `roll` (the job is not waited "
        "for: its daemon cannot finish it, and the host is stopped once nothing else is in "
        "flight) or `skip` (the host is left untouched and uncordoned, reported as skipped "
        "because stuck).",
    )
    bench: str | None = Field(
        default="cuzk-bench", pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]*$",
        description="The client the wait asks cuzk's GetStatus with (`NAME -a <daemon.listen> "
        "status`), run from the running release's folder (`current`): cuzk-bench, or a "
        "client of your own among release.executables that prints what `cuzk-bench status` "
        "prints. GetStatus is the only signal that names a WindowPoSt or WinningPoSt proof "
        "on the GPU. null: not asked.",
    )
    command_timeout: Seconds = Field(
        default=60, gt=0, description="Seconds the cordon or uncordon command may run."
    )
    cordon_takes: Seconds = Field(
        default=30, ge=0,
        description="Seconds after the cordon command ended before the cordon can have taken "
        "effect: the scheduler's poll interval (curio reads its node's `unschedulable` flag "
        "on its database poll, every 30 s). The stop waits this long, and for any job that "
        "appeared meanwhile, as for any job in flight (never killed); a host with no work in "
        "flight waits this long at most, its daemon looked at every 5 s and, at the window's "
        "end, by the stop right before its signal (a job that starts and ends between two "
        "looks is not named). Counted on the "
        "controller's clock from the cordon's report. Only with `cordon`. A task curio "
        "claimed before its poll may still prepare its input (a PoRep's vanilla proof) "
        "before it reaches cuzk: raise this to cover it.",
    )

    @model_validator(mode="after")
    def _uncordon_with_cordon(self) -> WorkSpec:
        if self.cordon is not None and self.uncordon is None:
            raise ValueError("work.cordon needs work.uncordon: a host is never left cordoned")
        return self
