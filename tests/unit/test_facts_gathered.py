"""Facts as pyinfra has them (rollout.steps.gather): the reads a plan's steps decide from,
gathered in one batch per host, cached by name and arguments, dropped once an action runs;
their reports are hostile data."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from rollout.engine import hostplan
from rollout.errors import StepFailed
from rollout.host.facts import MOST_READS, HostFacts
from rollout.steps.decision import Action, HostState
from rollout.steps.gather import Fact, gather
from rollout.steps.kinds.preflight import Checks, PreflightParams, Verdict


class Host:
    """A host that answers each read with `answers[name]` and records every call."""

    def __init__(self, answers: dict[str, Any], batch_fails: bool = False) -> None:
        self.answers, self.batch_fails, self.calls = answers, batch_fails, []

    def call(self, name: str, call_timeout: float | None = None, **kwargs: Any) -> Any:
        self.calls.append(name)
        if name == "batch":
            if self.batch_fails:
                return {"outcome": "batch", "reports": [None] * len(kwargs["calls"])}
            return {"outcome": "batch", "reports": [self.answers[c["call"]]
                                                    for c in kwargs["calls"]]}
        if name not in self.answers:
            raise StepFailed(f"ops.{name} on host gave no report")
        return self.answers[name]


ANSWERS = {"gpus": {"outcome": "ran", "exit": 0, "output": "0, H100\n"},
           "cpu_info": {"outcome": "read", "text": "flags: adx\n"},
           "file_present": {"outcome": "present"}}


def test_the_facts_of_every_kind_in_the_plan_are_read_in_one_batch() -> None:
    host = Host(ANSWERS)
    wanted = [Fact("gpus", {"timeout": 60}), Fact("cpu_info"), Fact("gpus", {"timeout": 60})]
    facts = gather(host, HostFacts(), wanted)  # type: ignore[arg-type]
    assert host.calls == ["batch"]  # one round trip, the same read asked twice made once
    assert facts.read("gpus", {"timeout": 60}) == ANSWERS["gpus"]
    assert facts.read("cpu_info", {}) == ANSWERS["cpu_info"]


def test_a_cached_fact_is_not_read_again_and_arguments_tell_facts_apart() -> None:
    host = Host(ANSWERS)
    first = gather(host, HostFacts(), [Fact("file_present", {"path": "/a"})])  # type: ignore[arg-type]
    again = gather(host, first, [Fact("file_present", {"path": "/a"})])  # type: ignore[arg-type]
    assert again is first and host.calls == ["file_present"]
    other = gather(host, first, [Fact("file_present", {"path": "/b"})])  # type: ignore[arg-type]
    assert host.calls == ["file_present", "file_present"]
    assert other.read("file_present", {"path": "/b"}) is not None
    assert first.read("file_present", {"path": "/b"}) is None


def test_a_fact_with_a_url_argument_is_a_fact_of_its_own() -> None:
    status = Fact("work", {"status_url": "http://127.0.0.1:9821/status"})
    assert status.key != Fact("work", {"status_url": "http://127.0.0.1:9822/status"}).key


def test_a_read_the_batch_did_not_answer_is_made_alone_or_left_to_the_run() -> None:
    host = Host({"gpus": ANSWERS["gpus"]}, batch_fails=True)
    facts = gather(host, HostFacts(), [Fact("gpus"), Fact("cpu_info")])  # type: ignore[arg-type]
    assert host.calls == ["batch", "gpus", "cpu_info"]
    assert facts.read("gpus", {}) is not None and facts.read("cpu_info", {}) is None


def test_the_plan_gathers_what_each_step_kind_declares(tmp_path: Any) -> None:
    from contexts import settings_for, small_host

    from rollout.host.layout import Layout
    from rollout.steps.decision import Target

    target = Target(small_host(), Layout(), settings_for(small_host()), None)
    specs = [SimpleNamespace(kind="preflight", params={}),
             SimpleNamespace(kind="preflight", params={"checks": ["files"]}),
             SimpleNamespace(kind="preflight", params={"checks": "not a list"})]
    wanted = hostplan.needed_facts(target, specs)
    assert [f.name for f in wanted].count("check_root") == 2  # asked twice: one key, one read
    assert len({f.key for f in wanted}) == len(wanted) - 1  # the bad params: none asked


def test_hostile_reads_are_dropped_never_a_crash() -> None:
    good = {"call": "gpus", "kwargs": {}, "report": {"outcome": "ran"}}
    facts = HostFacts.parse({"reads": [good, "x", None, {"call": 1, "kwargs": {}, "report": {}},
                                       {"call": "a", "kwargs": [], "report": {}},
                                       {"call": "b", "kwargs": {}, "report": "text"}]})
    assert list(facts.reads) == ['gpus {}']
    many = HostFacts.parse({"reads": [{"call": f"r{i}", "kwargs": {}, "report": {}}
                                      for i in range(1000)]})
    assert len(many.reads) == MOST_READS
    assert HostFacts.parse({"reads": {"gpus {}": {}}}).reads == {}


def test_an_action_drops_the_gathered_facts() -> None:
    """Preflight's apply records the verdicts its decide made (no host call), and once it
    ran the plan's facts, with their reads, are gone: a later step reads afresh."""
    facts = HostFacts(reads={"gpus {}": {"outcome": "ran"}})
    verdict = Verdict((), ("GPUs [0] present",))
    ctx = SimpleNamespace(state=HostState(facts=facts), target=None,
                          prefetch=lambda reads: None, forget_reads=lambda: None)
    decided = Action("check gpus", PreflightParams(), Checks(("gpus",), {"gpus": verdict}))
    result = hostplan.apply(ctx, "preflight", decided)  # type: ignore[arg-type]
    assert result.reason == "GPUs [0] present" and ctx.state.facts is None
