"""The unit tier's fake host (fakehost.py) answers host calls as ops.py does: the same
actions and arguments, the same outcome and keys for the same state; and it answers no shell
text but the lines rollout still writes (a host script's start, the base transport's upload).
Run here against ops.py itself, in this process, on a temporary root."""

from __future__ import annotations

import inspect
import json
from pathlib import Path
from typing import Any

import pytest
from fakehost import FakeHost

from rollout.host.scripts import ops

RELEASE = "abcdefabcdef"


def _fake_call(host: FakeHost, action: str, **kwargs: Any) -> dict[str, Any]:
    report: dict[str, Any] = json.loads(host.call("", f"ops.{action}", kwargs).stdout)
    return report


def test_every_answer_is_an_ops_action_with_its_arguments() -> None:
    handlers = {n.removeprefix("_op_"): getattr(FakeHost, n) for n in dir(FakeHost)
                if n.startswith("_op_")}
    assert handlers and set(handlers) <= set(ops.ACTIONS), set(handlers) - set(ops.ACTIONS)
    for action, handler in handlers.items():
        takes = set(inspect.signature(ops.ACTIONS[action]).parameters)
        named = {p.name for p in inspect.signature(handler).parameters.values()
                 if p.kind is not p.VAR_KEYWORD} - {"self"}
        assert named <= takes, (action, named - takes)


@pytest.mark.parametrize(("action", "kwargs"), [
    ("hold", {"root": "/data", "force": True}),  # an argument hold does not take
    ("point_current", {"root": "/data"}),  # one it needs, missing
    ("no_such_action", {}),
])
def test_a_call_ops_refuses_is_refused_alike(action: str, kwargs: dict[str, Any]) -> None:
    host = FakeHost("h")
    assert _fake_call(host, action, **kwargs) == ops.call(action, kwargs)
    assert ops.call(action, kwargs)["outcome"] == "bad-call"
    assert not host.held


# (action, kwargs; "ROOT" is the root) on a host with nothing on it, then after `before`
SAME_STATE = [
    ("hold", {"root": "ROOT"}, []),
    ("hold", {"root": "ROOT"}, [("hold", {"root": "ROOT"})]),
    ("release_hold", {"root": "ROOT"}, []),
    ("release_hold", {"root": "ROOT"}, [("hold", {"root": "ROOT"})]),
    ("stop", {"root": "ROOT"}, []),
    ("point_current", {"root": "ROOT", "release": RELEASE}, []),
    ("point_current", {"root": "ROOT", "release": "../../etc"}, []),
    ("pointed", {"root": "ROOT"}, []),
    ("start", {"root": "ROOT", "wait": 0.1}, []),
    ("prune", {"root": "ROOT", "releases": [RELEASE, ".."]}, []),
    ("remove_partial", {"root": "ROOT", "name": "../x"}, []),
    ("remove_partial", {"root": "ROOT", "name": ".partial-x"}, []),
    ("pull_folder", {"root": "ROOT", "name": "x; rm -rf /"}, []),
    ("unstage", {"root": "ROOT", "release": RELEASE}, []),
    ("forget_validated", {"root": "ROOT"}, []),
    ("uncordon", {"root": "ROOT", "command": "true"}, []),
    ("input_check", {"path": "ROOT/c1.json", "size": 10}, []),
    ("stage_input", {"partial": "ROOT/c1.json.part", "path": "ROOT/c1.json",
                     "sha256": "0" * 64}, []),
    ("restore_config", {"config_path": "ROOT/cuzk.toml", "kept_config": "ROOT/k"}, []),
    ("remove_files", {"paths": ["ROOT/a", "ROOT/b"]}, []),
    ("make_folder", {"path": "ROOT"}, []),
    ("work", {"status_url": "http://127.0.0.1:1/status", "proc": "ROOT"}, []),
    ("read_release", {"root": "ROOT", "release": RELEASE}, []),
]


@pytest.mark.parametrize(("action", "kwargs", "before"), SAME_STATE,
                         ids=[f"{a}-{i}" for i, (a, _, _) in enumerate(SAME_STATE)])
def test_the_same_state_gets_the_same_outcome_and_keys(
        tmp_path: Path, action: str, kwargs: dict[str, Any],
        before: list[tuple[str, dict[str, Any]]]) -> None:
    root = str(tmp_path)

    def rooted(given: dict[str, Any]) -> dict[str, Any]:
        return {k: json.loads(json.dumps(v).replace("ROOT", root)) for k, v in given.items()}

    host = FakeHost("h")
    for act, args in before:
        ops.call(act, rooted(args))
        _fake_call(host, act, **rooted(args))
    real = ops.call(action, rooted(kwargs))
    fake = _fake_call(host, action, **rooted(kwargs))
    assert (fake["outcome"], sorted(fake)) == (real["outcome"], sorted(real))


def test_a_proof_is_recorded_only_where_its_output_passes_the_pattern() -> None:
    host = FakeHost("h", current=RELEASE, releases={RELEASE: {}}, daemon=RELEASE)
    record = json.dumps({"release": RELEASE, "pid": 101, "starttime": 1})
    args = {"command": "cuzk-bench", "timeout": 5.0, "kill_after": 1.0,
            "evidence": "/data/rollout/validated.json", "record": record}
    wrong = _fake_call(host, "prove", **args, pattern="^no such line$")
    assert (wrong["passed"], wrong["recorded"], host.validated) == (False, False, None)
    right = _fake_call(host, "prove", **args, pattern="COMPLETED")
    assert (right["outcome"], right["passed"], right["recorded"]) == ("ran", True, True)
    assert host.validated == json.loads(record)


@pytest.mark.parametrize("command", [
    "readlink -f -- /data/current",
    "ln -sfn -- releases/abcdefabcdef /data/current.new && mv -T -- /data/current.new /data/x",
    "touch -- /data/rollout/hold",
    "curl -fsS http://127.0.0.1:9821/status",
    "sh -c 'cuzk-bench prove'",
])
def test_shell_text_of_rollout_s_own_is_not_answered(command: str) -> None:
    with pytest.raises(AssertionError, match="does not answer"):
        FakeHost("h").run(command)
