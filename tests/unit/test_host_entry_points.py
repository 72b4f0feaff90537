"""Every host entry point behind the same call (issue 26): the drain, the lock, the files and
the facts are ops actions with declared specs, run here on a temporary root and in the text
a host receives (no argv wrappers left); fetch.py says a failed connection in words."""

from __future__ import annotations

import ast
import collections
import errno
import json
import os
import socket
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from test_host_action_specs import run_shipped, shape_problem

from rollout.engine.locks import LockPolicy, holder_for, take_host_lock
from rollout.errors import StepFailed
from rollout.host.scripts import SCRIPTS, fetch, ops, script_text
from rollout.host.scripts.actions import lock as lock_rule

HOLDER = {"run_id": "run-a", "operator": "op", "controller": "ctl", "pid": 1,
          "started": 1.0, "version": "v"}
OTHER = {**HOLDER, "run_id": "run-b"}


def called(action: str, **kwargs: Any) -> dict[str, Any]:
    """One call through ops.call, its report checked against its declared shape."""
    report = ops.call(action, kwargs)
    assert report.get("outcome") != "bad-call", report
    assert shape_problem(action, report) is None, (shape_problem(action, report), report)
    return report


def test_the_new_entry_points_are_declared_actions() -> None:
    for name in ("drain", "lock", "write_file", "copy_file", "check_root", "facts"):
        assert name in ops.SPECS and ops.SPECS[name]["outcomes"], name
    assert ops.SPECS["drain"]["args"]["script"]["required"] is False


def test_the_lock_takes_refreshes_refuses_breaks_and_releases(tmp_path: Path) -> None:
    root = str(tmp_path)
    taken = called("lock", root=root, do="take", holder=HOLDER)
    assert taken["outcome"] == "done" and taken["ok"] and len(taken["host_id"]) == 32
    assert called("lock", root=root, do="refresh", holder=HOLDER)["note"] == "refreshed"
    held = called("lock", root=root, do="take", holder=OTHER)
    assert held["outcome"] == "held" and json.loads(held["lock"]["text"])["run_id"] == "run-a"
    stale = called("lock", root=root, do="break", holder=OTHER, expect="0" * 64)
    assert stale["outcome"] == "held" and stale["note"] == "the lock changed: not broken"
    broken = called("lock", root=root, do="break", holder=OTHER, expect=held["lock"]["sha256"])
    assert broken["outcome"] == "done" and broken["note"] == "taken"
    assert called("lock", root=root, do="release", holder=OTHER)["note"] == "released"
    assert called("lock", root=root, do="rm", holder=OTHER)["outcome"] == "refused"


def test_the_shipped_lock_is_the_same_rule(tmp_path: Path) -> None:
    out = run_shipped("lock", {"root": str(tmp_path), "do": "take", "holder": HOLDER})
    assert out["ok"] and out["outcome"] == "done"
    again = called("lock", root=str(tmp_path), do="take", holder=OTHER)
    assert again["outcome"] == "held" and again["host_id"] == out["host_id"]


def test_a_lock_the_user_may_not_write_names_the_path(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    state = str(tmp_path / "rollout")

    def denied(path: str, mode: int = 0o755) -> None:
        raise PermissionError(errno.EACCES, os.strerror(errno.EACCES), state)

    monkeypatch.setattr(lock_rule, "safe_mkdir", denied)
    out = called("lock", root=str(tmp_path), do="take", holder=HOLDER)
    assert out["outcome"] == "denied" and out["denied"] == state and not out["ok"]


def test_the_controller_says_a_denied_lock_path_in_the_operators_words() -> None:
    answers = {"outcome": "denied", "ok": False, "denied": "/data/rollout",
               "refused": "/data/rollout: the deploy lock cannot be written there"}
    ctx = SimpleNamespace(name="h1", host=SimpleNamespace(user="prover"),
                          layout=SimpleNamespace(root="/data"),
                          call=lambda action, call_timeout=None, **kw: answers)
    with pytest.raises(StepFailed) as caught:
        take_host_lock(ctx, holder_for("r", "op", "ctl", "v"), LockPolicy(),  # type: ignore[arg-type]
                       lambda found: None)
    assert caught.value.kind == "path-denied" and not caught.value.retryable
    assert "permission denied on /data/rollout for user prover" in str(caught.value)


def test_files_are_written_kept_copied_and_checked_as_calls(tmp_path: Path) -> None:
    path, kept = str(tmp_path / "c.toml"), str(tmp_path / "c.toml.kept")
    assert called("write_file", path=path, text="a = 1\n")["outcome"] == "written"
    assert called("write_file", path=path, text="a = 1\n", if_changed=True)["outcome"] == \
        "unchanged"
    assert called("write_file", path=path, text="a = 2\n", keep=kept)["changed"]
    assert Path(kept).read_text() == "a = 1\n" and oct(os.stat(path).st_mode & 0o777) == "0o600"
    assert called("copy_file", src=kept, dst=path)["outcome"] == "copied"
    assert Path(path).read_text() == "a = 1\n"
    assert called("copy_file", src=str(tmp_path / "none"), dst=path)["outcome"] == "none"
    os.symlink("/etc/passwd", tmp_path / "link")
    refused = called("write_file", path=str(tmp_path / "link"), text="x")
    assert refused["outcome"] == "refused" and Path("/etc/passwd").read_text() != "x"
    (tmp_path / "rollout").mkdir(mode=0o755)
    os.symlink("/etc", tmp_path / "rollout" / "planted")
    found = called("check_root", root=str(tmp_path), paths=[path])
    assert found["outcome"] == "problems" and any("planted" in p for p in found["problems"])


def test_the_shipped_write_writes_as_the_call_writes(tmp_path: Path) -> None:
    a, b = tmp_path / "a", tmp_path / "b"
    assert run_shipped("write_file", {"path": str(a), "text": "same\n"})["changed"]
    assert called("write_file", path=str(b), text="same\n")["changed"]
    assert a.read_bytes() == b.read_bytes()


def test_the_facts_are_a_call_with_their_arguments(tmp_path: Path) -> None:
    (tmp_path / "f").write_bytes(b"x")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        out = called("facts", root=str(tmp_path), digests=[str(tmp_path / "f")], ports=[port])
    assert out["outcome"] == "read" and out["root"] == str(tmp_path)
    assert out["digests"] == {str(tmp_path / "f"):
                              "2d711642b726b04401627ca9fbac32f5c8530fb1903cc4db02258717921a4881"}
    assert [o["pid"] for o in out["port_owners"][str(port)]] == [os.getpid()]
    plain = run_shipped("facts", {"root": str(tmp_path)})
    assert plain["outcome"] == "read" and set(plain) == set(out)


def test_the_drain_runs_in_the_call_and_needs_no_script(tmp_path: Path) -> None:
    """No daemon stopped (pid 0): drained at once, in this process and in the shipped text;
    each drain recorded in drains.jsonl; a `script` an older guard passes is ignored."""
    settings = {"deadline": 5.0, "plateau": 1.0, "zombie_grace": 1.0}
    out = called("drain", root=str(tmp_path), settings=settings)
    assert out["outcome"] == "drained" and out["pid"] == 0, out
    old = called("drain", root=str(tmp_path), script="/nonexistent/drain.py",
                 settings=settings)
    assert old["outcome"] == "drained"
    plain = run_shipped("drain", {"root": str(tmp_path), "pid": 0,
                                  "settings": {"deadline": 5.0}})
    assert plain["outcome"] == out["outcome"] and plain["drained_by"] == out["drained_by"]
    recorded = (tmp_path / "rollout" / "drains.jsonl").read_text().splitlines()
    assert len(recorded) == 3


def test_inlined_rules_run_no_main_and_each_script_one() -> None:
    """A module inlined into a host script never runs a main of its own at import."""
    for name in SCRIPTS:
        assert script_text(name).count('if __name__ == "__main__":') == 1, name


def test_a_refused_download_is_said_in_words(tmp_path: Path) -> None:
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    url = f"http://127.0.0.1:{port}/x"
    with pytest.raises(fetch.FetchFailed) as caught:
        fetch.probe(url, 2.0)
    assert str(caught.value).endswith("connection refused"), caught.value
    with pytest.raises(fetch.FetchFailed) as again:
        fetch.fetch_file(url, str(tmp_path / "x"), "-", 5, retries=0, sleep=lambda s: None)
    assert again.value.kind == "unreachable" and "Errno" not in str(again.value)
    assert str(again.value) == f"{url}: connection refused"


def test_the_shipped_text_defines_each_class_and_function_once() -> None:
    """One namespace on a host: a class of one family never shadows another's."""
    names = [node.name for node in ast.parse(script_text("ops")).body
             if isinstance(node, ast.ClassDef | ast.FunctionDef)]
    assert [n for n, c in collections.Counter(names).items() if c > 1] == []
