"""preload: the daemon loads the SRS of the host's proof kinds before its first proof
(`cuzk-bench preload -c CIRCUIT`, cuzk's PreloadSRS), so that neither the validation nor the
first production proof after the uncordon pays the 30 to 90 s load.

Nothing to undo: what it loads lives in the daemon's memory, and a rollback stops that
daemon; so a rollback never runs it (no `undo`)."""

from __future__ import annotations

from typing import Literal, get_args

from pydantic import Field

from rollout.config.steps import KindRule, ParamSeconds, StrictParams
from rollout.errors import StepFailed
from rollout.host.facts import HostFacts
from rollout.jsontypes import JSONObject
from rollout.output.events import StepResult, changed, skipped
from rollout.secrets import head
from rollout.steps.base import HostContext, Kind
from rollout.steps.daemon import already_validated
from rollout.steps.decision import Action, Call, Decision, Target

Circuit = Literal["porep-32g", "porep-64g", "wpost-32g", "winning-32g", "snap-32g", "snap-64g"]
CIRCUITS: tuple[str, ...] = get_args(Circuit)  # cuzk's CircuitId (srs_manager.rs from_str_id)
TIMEOUT = 300.0


class PreloadParams(StrictParams):
    circuits: list[Circuit] | None = Field(
        default=None, min_length=1,
        description="Circuits whose SRS the daemon loads (cuzk's ids); default: "
        "validate.proof_kind where it is one, else porep-32g.")
    bench: str = Field(
        default="cuzk-bench", pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]*$",
        description="The release's bench executable (a name among build.executables).")
    timeout: ParamSeconds | None = Field(
        default=None, gt=0, description="Seconds each load may take (300): cuzk's call "
        "waits for ever where the budget cannot hold the SRS.")


def decide(facts: HostFacts, target: Target, params: PreloadParams) -> Decision:
    skip = already_validated(facts, target)
    if skip is not None:
        return skip
    rid = target.release_id or facts.current_release
    if rid is None and not target.pending:
        return Action("preload", params, fails="no release: current points at none")
    kind = target.settings.validation.proof_kind
    circuits: list[str] = list(params.circuits or [])
    circuits = circuits or [kind if kind in CIRCUITS else "porep-32g"]
    listen = target.settings.daemon.listen
    address = listen if listen.startswith("unix://") else f"http://{listen}"
    where = target.layout.release_dir(rid) if rid else target.layout.current  # a build to come
    bench = f"{where}/{params.bench}"
    seconds = float(params.timeout or TIMEOUT)
    calls = tuple(Call("preload", {"command": [bench, "-a", address, "preload", "-c", c],
                                   "circuit": c, "timeout": seconds}, seconds + 15)
                  for c in circuits)
    return Action(f"load the SRS of {', '.join(circuits)} in the daemon ({params.bench} "
                  "preload)", params, calls=calls)


def apply(ctx: HostContext, action: Action) -> StepResult:
    loaded, kept = [], []
    for call in action.calls:  # one at a time: a failed load stops the step
        report = ctx.run_call(call)
        circuit, outcome = str(call.kwargs["circuit"]), report.get("outcome")
        if outcome == "loaded":
            loaded.append(f"{circuit} in {report.get('load_ms')} ms")
        elif outcome == "kept":
            kept.append(circuit)
        else:
            raise StepFailed(f"preload of {circuit}: {head(str(report.get('reason')), 300)}",
                             retryable=outcome == "timeout", output=_output(report))
    if not loaded:
        return skipped(f"SRS already loaded: {', '.join(kept)}")
    also = f" ({', '.join(kept)} already)" if kept else ""
    return changed(f"SRS loaded: {', '.join(loaded)}{also}")


def _output(report: JSONObject) -> str:
    output = report.get("output")
    return output if isinstance(output, str) else ""


KIND = Kind("preload", PreloadParams,
            # the daemon answers (ready) before it is asked to load; the validation after
            KindRule("started", needs=("ready",), by_evidence=True), place=95,
            decide=decide, apply=apply)
