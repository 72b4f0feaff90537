"""Each host action's declared argument spec and report shape (actions/spec.py): checked by
ops.call before the action runs, in this process and in the text a host receives, and
true of the reports the actions give on a temporary root."""

from __future__ import annotations

import ast
import collections
import inspect
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from fakehost import shape_problem

from rollout.host.scripts import ops, script_text
from rollout.host.scripts.actions.spec import fits, type_of

RELEASE = "abcdefabcdef"


def run_shipped(action: str, kwargs: dict[str, Any]) -> dict[str, Any]:
    """The action as a host without an agent runs it: `python3 - --call --kwargs`."""
    p = subprocess.run([sys.executable, "-", "--call", action, "--kwargs", json.dumps(kwargs)],
                       input=script_text("ops").encode(), capture_output=True, timeout=60)
    assert p.returncode == 0, p.stderr
    out: dict[str, Any] = json.loads(p.stdout.decode().strip().splitlines()[-1])
    return out


# ---------------------------------------------------------------- the declarations


def test_every_action_declares_its_arguments_as_its_signature_takes_them() -> None:
    assert set(ops.SPECS) == set(ops.ACTIONS)
    for name, fn in ops.ACTIONS.items():
        params = inspect.signature(fn).parameters
        args = ops.SPECS[name]["args"]
        assert list(args) == list(params), name
        for arg, field in args.items():
            default = params[arg].default
            assert field["required"] == (default is inspect.Parameter.empty), (name, arg)
            if not field["required"]:
                assert field["default"] == default, (name, arg)
                assert fits(default, type_of(field)), (
                    f"{name}: the default of {arg} is not of its declared type")


def test_every_action_declares_its_report_and_the_table_is_plain_data() -> None:
    for name, spec in ops.SPECS.items():
        assert set(spec) == {"args", "returns", "outcomes"}, name
        assert name == "owners" or spec["outcomes"], f"{name} declares no outcome word"
        for field in [*spec["args"].values(), *spec["returns"].values()]:
            fits(None, field["type"])  # a type the checker knows (else KeyError)
    assert json.loads(json.dumps(ops.SPECS)) == ops.SPECS


def test_the_shipped_text_defines_each_name_once() -> None:
    """The families share one namespace on a host: no helper may shadow another's."""
    names: list[str] = []
    for node in ast.parse(script_text("ops")).body:
        if isinstance(node, ast.FunctionDef):
            names.append(node.name)
        elif isinstance(node, ast.Assign):
            names += [t.id for t in node.targets if isinstance(t, ast.Name)]
    assert [n for n, c in collections.Counter(names).items() if c > 1] == []
    text = script_text("ops")
    for family in ("spec", "base", "hold", "current", "daemon", "proving", "folders",
                   "release", "reads", "work"):
        assert text.count(f"# ---- inlined from rollout/host/scripts/actions/{family}.py\n") == 1
    assert text.index("actions/base.py") < text.index("actions/hold.py") < text.index(
        "actions/daemon.py") < text.index("actions/reads.py")


# ---------------------------------------------------------------- a call that does not fit


MISFITS = [
    ("hold", {"root": "ROOT", "rm": "-rf /"}, "hold: got an unexpected keyword argument 'rm'"),
    ("hold", {}, "hold: missing a required argument: 'root'"),
    ("hold", {"root": ["ROOT"]}, "hold: argument 'root' must be str, not list"),
    ("hold", {"root": None}, "hold: argument 'root' must be str, not NoneType"),
    ("log_tail", {"root": "ROOT", "lines": True}, "log_tail: argument 'lines' must be int, "
     "not bool"),
    ("log_tail", {"root": "ROOT", "lines": 2.5}, "log_tail: argument 'lines' must be int, "
     "not float"),
    ("stop", {"root": "ROOT", "grace": False}, "stop: argument 'grace' must be float, not bool"),
    ("stop", {"root": "ROOT", "grace": float("inf")}, "stop: argument 'grace' must be float, "
     "not float"),
    ("prune", {"root": "ROOT", "releases": "r1"}, "prune: argument 'releases' must be [str], "
     "not str"),
    ("prune", {"root": "ROOT", "releases": ["r1", 2]}, "prune: argument 'releases' must be "
     "[str], not list"),
    ("make_folder", {"path": "ROOT/made", "link_ok": "yes"}, "make_folder: argument 'link_ok' "
     "must be bool, not str"),
    ("install_release", {"root": "ROOT", "release": RELEASE, "partial": "ROOT/p",
                         "manifest": "{}", "names": [], "expect": {"a": 1}},
     "install_release: argument 'expect' must be {str?}?, not dict"),
]


def rooted(value: Any, root: str) -> Any:
    if isinstance(value, str):
        return value.replace("ROOT", root)
    if isinstance(value, list):
        return [rooted(v, root) for v in value]
    if isinstance(value, dict):
        return {k: rooted(v, root) for k, v in value.items()}
    return value


@pytest.mark.parametrize(("action", "kwargs", "reason"), MISFITS,
                         ids=[r.split(": ", 1)[1][:40] for _, _, r in MISFITS])
def test_a_call_that_does_not_fit_its_spec_is_refused_and_never_runs(
        tmp_path: Path, action: str, kwargs: dict[str, Any], reason: str) -> None:
    root = str(tmp_path)
    given = rooted(kwargs, root)
    assert ops.call(action, given) == {"outcome": "bad-call", "reason": reason}
    assert os.listdir(tmp_path) == []  # nothing made: no hold, no folder


@pytest.mark.parametrize(("action", "kwargs", "reason"), [MISFITS[0], MISFITS[4], MISFITS[8]])
def test_the_text_a_host_receives_refuses_the_same_calls(
        tmp_path: Path, action: str, kwargs: dict[str, Any], reason: str) -> None:
    out = run_shipped(action, rooted(kwargs, str(tmp_path)))
    assert out == {"outcome": "bad-call", "reason": reason}
    assert os.listdir(tmp_path) == []


def test_the_text_a_host_receives_runs_a_call_that_fits(tmp_path: Path) -> None:
    out = run_shipped("hold", {"root": str(tmp_path)})
    assert out["outcome"] == "set" and (tmp_path / "rollout" / "hold").exists()
    assert shape_problem("hold", out) is None


def test_an_int_is_a_float_and_none_is_taken_where_declared(tmp_path: Path) -> None:
    assert ops.call("user_command", {"command": "true", "timeout": 5})["outcome"] == "ran"
    out = ops.call("input_check", {"path": str(tmp_path / "none"), "size": None})
    assert out["outcome"] == "missing"


# ---------------------------------------------------------------- reports as declared


@pytest.fixture
def root(tmp_path: Path) -> Path:
    r = tmp_path / "data"
    (r / "releases" / RELEASE).mkdir(parents=True)
    (r / "releases" / RELEASE / "cuzk-daemon").write_bytes(b"#!/bin/sh\n")
    (r / "releases" / RELEASE / "RELEASE.json").write_text(
        json.dumps({"artifacts": {"cuzk-daemon": {}}}))
    (r / "releases" / "0123456789ab").mkdir()
    (r / "in.bin").write_bytes(b"input")
    (r / "c1.json").write_text(json.dumps({"SectorNum": 7, "Phase1Out": "e30="}))
    return r


def calls_on(root: Path) -> list[tuple[str, dict[str, Any]]]:
    """Most actions, each once or more, as the hostside tests run them on a temp root."""
    r, rel = str(root), f"{root}/releases/{RELEASE}"
    (root / "rollout" / "staging" / RELEASE).mkdir(parents=True)
    (root / "partial.bin").write_bytes(b"input")
    digest = ops.input_check(f"{r}/in.bin")["sha256"]
    return [
        ("hold", {"root": r}), ("hold", {"root": r}), ("release_hold", {"root": r}),
        ("release_hold", {"root": r}),
        ("point_current", {"root": r, "release": RELEASE}),
        ("point_current", {"root": r, "release": "../etc"}),
        ("pointed", {"root": r}),
        ("restore_config", {"config_path": f"{r}/c.toml", "kept_config": f"{r}/none"}),
        ("prune", {"root": r, "releases": ["0123456789ab", RELEASE, "../x"]}),
        ("remove_partial", {"root": r, "name": ".partial-1"}),
        ("make_folder", {"path": f"{r}/made"}),
        ("config_folders", {"config_path": f"{r}/etc/c.toml", "param_cache": f"{r}/params"}),
        ("remove_files", {"paths": [f"{r}/nothing"]}),
        ("identities", {"directory": rel, "names": ["cuzk-daemon", "none"]}),
        ("file_sums", {"directory": rel, "names": ["cuzk-daemon"], "mode": 0o755}),
        ("read_release", {"root": r, "release": RELEASE}),
        ("staging_survey", {"root": r, "release": "fedcbafedcba", "names": ["cuzk-daemon"]}),
        ("unstage", {"root": r, "release": RELEASE}),
        ("pull_folder", {"root": r, "name": ".partial-x-pull"}),
        ("install_release", {"root": r, "release": "fedcbafedcba",
                             "partial": f"{r}/releases/.partial-x-pull", "manifest": "{}",
                             "names": []}),
        ("input_check", {"path": f"{r}/in.bin", "size": 5}),
        ("input_check", {"path": f"{r}/in.bin", "size": 9}),
        ("stage_input", {"partial": f"{r}/partial.bin", "path": f"{r}/staged.bin",
                         "sha256": digest}),
        ("probe", {"input_path": f"{r}/in.bin", "ports": [1], "pid": os.getpid()}),
        ("owners", {"ports": [1], "pid": os.getpid()}),
        ("cpu_info", {}), ("file_present", {"path": f"{r}/in.bin"}),
        ("gpus", {"timeout": 5}), ("ldd", {"directory": rel, "names": ["cuzk-daemon"]}),
        ("params_probe", {"cache": f"{r}/params", "pce": "x.pce", "names": ["a.params"],
                          "reuse": [r]}),
        ("pce_sizes", {"cache": f"{r}/params", "names": ["x.pce"]}),
        ("c1_probe", {"path": f"{r}/c1.json", "limit": 1 << 20}),
        ("c1_probe", {"path": f"{r}/none", "limit": 10}),
        ("log_tail", {"root": r}), ("forget_validated", {"root": r}),
        ("register", {"root": r, "onstart": f"{r}/onstart.sh"}),
        ("stop", {"root": r}), ("start", {"root": f"{r}/empty"}),
        ("drain", {"root": r, "script": f"{r}/no-drain.py"}),
        ("wait_ready", {"status_url": "", "seconds": 0.1, "grpc_url": "http://127.0.0.1:1/"}),
        ("prove", {"command": "", "timeout": 5, "kill_after": 1}),
        ("prove", {"command": "echo hi", "timeout": 5, "kill_after": 1, "pattern": "x"}),
        ("work", {"status_url": ""}), ("user_command", {"command": "exit 3"}),
        ("cordon", {"root": r, "run_id": "run-1", "command": "true"}),
        ("cordoned", {"root": r}),
        ("uncordon", {"root": r, "command": "true"}), ("uncordon", {"root": r, "command": ""}),
        ("batch", {"calls": [{"call": "pointed", "kwargs": {"root": r}}, "no call"]}),
    ]


def test_each_report_has_its_declared_shape(root: Path) -> None:
    seen = set()
    for action, kwargs in calls_on(root):
        report = ops.call(action, kwargs)
        assert report.get("outcome") != "bad-call", (action, report)
        assert shape_problem(action, report) is None, (action, report,
                                                       shape_problem(action, report))
        seen.add(action)
    assert len(seen) >= 40, set(ops.ACTIONS) - seen


def test_the_shape_check_sees_a_report_that_is_not_as_declared() -> None:
    assert shape_problem("pointed", {"outcome": "pointed", "reason": "", "current": 1})
    assert shape_problem("pointed", {"outcome": "gone", "reason": ""})
    assert shape_problem("pointed", {"outcome": "none", "reason": "", "extra": None})
    assert shape_problem("pointed", {"outcome": "none", "reason": "", "current": None}) is None


def test_a_stop_of_a_real_daemon_and_the_drain_after_it_report_as_declared(
        root: Path) -> None:
    exe = root / "releases" / RELEASE / "cuzk-daemon"
    exe.write_text(f"#!{sys.executable}\nimport time\nwhile True:\n    time.sleep(0.05)\n")
    exe.chmod(0o755)
    (root / "rollout").mkdir()
    daemon = subprocess.Popen([str(exe)])
    try:
        cmdline = Path(f"/proc/{daemon.pid}/cmdline")
        end = time.monotonic() + 20
        while str(exe).encode() not in cmdline.read_bytes() and time.monotonic() < end:
            time.sleep(0.02)  # until the interpreter has exec'd the daemon's script
        began = Path(f"/proc/{daemon.pid}/stat").read_text().rsplit(")", 1)[1].split()[19]
        (root / "rollout" / "daemon.pid").write_text(f"{daemon.pid} {began} {exe}\n")
        (root / "rollout" / "supervisor.json").write_text(json.dumps({"daemon_pid": daemon.pid}))
        stopped = ops.call("stop", {"root": str(root), "grace": 5})
    finally:
        daemon.kill()
        daemon.wait()
    assert stopped["outcome"] == "stopped" and shape_problem("stop", stopped) is None, stopped
    drained = ops.call("drain", {"root": str(root), "settings": {"deadline": 3, "plateau": 0.5}})
    assert drained["outcome"] in ("drained", "plateau", "deadline"), drained
    assert shape_problem("drain", drained) is None, (shape_problem("drain", drained), drained)
