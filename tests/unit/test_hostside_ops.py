"""ops.py, rollout's host API, run here as a host runs it (python3 -c BOOTSTRAP --call NAME
--kwargs-stdin, and through the agent): on a temporary root folder, with real processes."""

from __future__ import annotations

import hashlib
import http.server
import json
import os
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from contexts import AgentTransport

from rollout.host.scripts import bootstrap, ops, script_text, sized


class Status(http.server.BaseHTTPRequestHandler):
    code = 200

    def do_GET(self) -> None:  # noqa: N802 - the http.server name
        body = json.dumps({"uptime_secs": 1.5}).encode()
        self.send_response(self.code)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


class Failing(Status):
    code = 503


def _serve(handler: type[Status]) -> Iterator[int]:
    server = http.server.HTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield server.server_address[1]
    server.shutdown()
    server.server_close()


@pytest.fixture
def status_port() -> Iterator[int]:
    yield from _serve(Status)


@pytest.fixture
def failing_status_port() -> Iterator[int]:
    yield from _serve(Failing)


@pytest.fixture
def grpc_port() -> Iterator[int]:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen(8)
        yield s.getsockname()[1]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def call(action: str, **kwargs: Any) -> dict[str, Any]:
    """A host action, run as a host runs it through its agent (a forked child of the warm
    agent that compiled ops.py once: about 0.15 s of CPU less a call than a python3 of its
    own); its one JSON line."""
    r = AgentTransport("h").call(script_text("ops"), f"ops.{action}", kwargs, 60)
    assert r.exit_code == 0, r.stderr
    out: dict[str, Any] = json.loads(r.stdout.strip().splitlines()[-1])
    return out


def call_alone(action: str, **kwargs: Any) -> dict[str, Any]:
    """A host action, run as a host without an agent runs it; its one JSON line."""
    feed = sized(script_text("ops")) + json.dumps(kwargs).encode()
    p = subprocess.run([sys.executable, "-c", bootstrap("ops.py"), "--call", action,
                        "--kwargs-stdin"], input=feed, capture_output=True, timeout=60)
    assert p.returncode == 0, p.stderr
    out: dict[str, Any] = json.loads(p.stdout.decode().strip().splitlines()[-1])
    return out


def wait(grpc: int, status: int, seconds: float = 20, **extra: Any) -> dict[str, Any]:
    return call("wait_ready", seconds=seconds, grpc_url=f"http://127.0.0.1:{grpc}/",
                status_url=f"http://127.0.0.1:{status}/status", ports=[status], **extra)


def test_both_ports_answer_then_their_owners(grpc_port: int, status_port: int) -> None:
    out = wait(grpc_port, status_port, watch=os.getpid())
    assert out["outcome"] == "ready", out
    assert json.loads(out["answer"]) == {"uptime_secs": 1.5}
    assert str(status_port) in out["owners"]["ports"]


def test_grpc_port_not_bound_is_not_ready(status_port: int) -> None:
    out = wait(_free_port(), status_port, seconds=0.5)
    assert out["outcome"] == "timeout" and "answer" not in out


def test_status_port_answering_an_error_is_not_ready(grpc_port: int,
                                                     failing_status_port: int) -> None:
    assert wait(grpc_port, failing_status_port, seconds=0.5)["outcome"] == "timeout"


def test_daemon_that_died_ends_the_wait() -> None:
    dead = subprocess.Popen(["true"])
    dead.wait()
    out = wait(_free_port(), _free_port(), watch=dead.pid, seconds=60)
    assert out["outcome"] == "died"
    assert out["reason"] == f"daemon {dead.pid} died during start-up"


def test_pid_read_from_the_pidfile_as_hostile_text(tmp_path: Path, grpc_port: int) -> None:
    pidfile = tmp_path / "daemon.pid"
    pidfile.write_text("$(reboot) 1 /x\n")  # not a pid: nothing watched, the wait runs out
    assert wait(grpc_port, _free_port(), seconds=0.5, pidfile=str(pidfile))["outcome"] == "timeout"


# ---------------------------------------------------------------- the other actions


RELEASE = "abcdefabcdef"


@pytest.fixture
def root(tmp_path: Path) -> Path:
    r = tmp_path / "data"
    (r / "releases" / RELEASE).mkdir(parents=True)
    (r / "releases" / "0123456789ab").mkdir()
    (r / "rollout").mkdir()
    return r


def test_hold_is_set_once_and_released(root: Path) -> None:
    assert call_alone("hold", root=str(root))["outcome"] == "set"
    assert call("hold", root=str(root))["outcome"] == "kept"
    assert (root / "rollout" / "hold").exists()
    assert call("release_hold", root=str(root))["outcome"] == "released"
    assert call("release_hold", root=str(root))["outcome"] == "none"


def test_hold_never_writes_through_a_link(root: Path, tmp_path: Path) -> None:
    (tmp_path / "elsewhere").mkdir()
    (root / "rollout").rmdir()
    (root / "rollout").symlink_to(tmp_path / "elsewhere")
    p = subprocess.run([sys.executable, "-c", bootstrap("ops.py"), "--call", "hold",
                        "--kwargs-stdin"], input=sized(script_text("ops")) + json.dumps(
                            {"root": str(root)}).encode(), capture_output=True, timeout=60)
    assert p.returncode != 0 and b"symbolic link" in p.stderr
    assert not (tmp_path / "elsewhere" / "hold").exists()


def test_point_current_checks_before_it_acts(root: Path) -> None:
    out = call("point_current", root=str(root), release=RELEASE)
    assert out["outcome"] == "pointed" and out["previous"] is None
    assert os.readlink(root / "current") == f"releases/{RELEASE}"
    assert call("point_current", root=str(root), release=RELEASE)["outcome"] == "kept"
    out = call("point_current", root=str(root), release="0123456789ab")
    assert out["outcome"] == "pointed" and out["previous"] == RELEASE
    assert call("point_current", root=str(root), release="ffffffffffff")["outcome"] == "missing"


@pytest.mark.parametrize("hostile", ["../../etc", "a/b", "..", "", ".hidden", "$(reboot)"])
def test_point_current_refuses_what_is_no_release_id(root: Path, hostile: str) -> None:
    out = call("point_current", root=str(root), release=hostile)
    assert out["outcome"] in ("refused", "missing")
    assert not (root / "current").exists()


def test_restore_config_puts_back_what_differs(root: Path) -> None:
    kept, config = root / "rollout" / "kept.toml", root / "config.toml"
    kept.write_text("a = 1\n")
    assert call("restore_config", config_path=str(config),
                kept_config=str(kept))["outcome"] == "restored"
    assert config.read_text() == "a = 1\n"
    assert call("restore_config", config_path=str(config),
                kept_config=str(kept))["outcome"] == "kept"
    assert call("restore_config", config_path=str(config),
                kept_config=str(root / "none"))["outcome"] == "none"


def test_prune_never_removes_current_or_a_link_target(root: Path, tmp_path: Path) -> None:
    (root / "current").symlink_to(f"releases/{RELEASE}")
    precious = tmp_path / "precious"
    precious.mkdir()
    (precious / "keep").write_text("x")
    (root / "releases" / "linkedlinked").symlink_to(precious)
    out = call("prune", root=str(root), releases=[RELEASE, "0123456789ab", "linkedlinked",
                                                   "../.."])
    assert out["outcome"] == "pruned"
    assert sorted(out["removed"]) == ["0123456789ab", "linkedlinked"]
    assert (root / "releases" / RELEASE).is_dir() and (precious / "keep").exists()


def test_prove_records_evidence_only_for_a_passing_proof(root: Path) -> None:
    evidence = root / "rollout" / "validated.json"
    evidence.write_text("old")
    passing = "printf '=== Proof Result ===\nstatus: COMPLETED\nok\n'"
    out = call_alone("prove", command=passing, timeout=30, kill_after=5,
                     evidence=str(evidence), record='{"release": "x"}', pattern="ok")
    assert out["exit"] == 0 and out["recorded"] is True, out
    assert evidence.read_text() == '{"release": "x"}\n'
    out = call("prove", command="echo no; exit 3", timeout=30, kill_after=5,
               evidence=str(evidence), record="{}", pattern="ok")
    assert out["exit"] == 3 and out["recorded"] is False and not evidence.exists()


def test_prove_is_stopped_at_its_timeout(root: Path) -> None:
    out = call("prove", command="sleep 30", timeout=0.3, kill_after=1,
               evidence=str(root / "rollout" / "v.json"))
    assert out["exit"] == 124 and out["elapsed"] < 10


def test_a_call_that_does_not_fit_is_refused_not_run(root: Path) -> None:
    assert call("hold", root=str(root), rm="-rf /")["outcome"] == "bad-call"
    assert not (root / "rollout" / "hold").exists()


def daemon_release(root: Path) -> Path:
    exe = root / "releases" / RELEASE / "cuzk-daemon"
    exe.write_text(f"#!{sys.executable}\nimport time\nwhile True:\n    time.sleep(0.05)\n")
    exe.chmod(0o755)
    return exe


def starttime(pid: int) -> int:
    return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[19])


def test_stop_keeps_the_daemon_of_the_release_to_keep(root: Path) -> None:
    exe = daemon_release(root)
    d = subprocess.Popen([str(exe)])
    try:
        (root / "rollout" / "daemon.pid").write_text(f"{d.pid} {starttime(d.pid)} {exe}\n")
        (root / "rollout" / "supervisor.json").write_text(json.dumps({"daemon_pid": d.pid}))
        out = call("stop", root=str(root), grace=5, keep_release=RELEASE)
        assert out["outcome"] == "kept" and d.poll() is None
        assert not (root / "rollout" / "hold").exists()
        out = call("stop", root=str(root), grace=5)
        assert out["outcome"] == "stopped" and out["held"] is True, out
        assert (root / "rollout" / "hold").exists()
    finally:
        d.kill()
        d.wait()


def test_start_without_a_release_says_so(root: Path) -> None:
    (root / "rollout" / "hold").write_text("")
    out = call("start", root=str(root), wait=1)
    assert out["outcome"] == "no-release"
    assert (root / "rollout" / "hold").exists()  # nothing was changed


def test_the_agent_runs_a_call_in_a_forked_child(root: Path) -> None:
    """The same function through the agent: one request line, one answer line."""
    source = script_text("ops")
    import hashlib

    req = {"id": 7, "call": "ops.hold", "kwargs": {"root": str(root)},
           "sha": hashlib.sha256(source.encode()).hexdigest(), "source": source}
    stdin = sized(script_text("agent")) + (json.dumps(req) + "\n").encode()
    p = subprocess.run([sys.executable, "-c", bootstrap("agent.py")], input=stdin,
                       capture_output=True, timeout=60)
    lines = [json.loads(x) for x in p.stdout.decode().splitlines()]
    answer = next(x for x in lines if x.get("id") == 7)
    assert answer["exit"] == 0, answer
    assert json.loads(answer["stdout"])["outcome"] == "set"
    assert (root / "rollout" / "hold").exists()


def test_the_agent_refuses_a_call_whose_arguments_are_not_an_object(root: Path) -> None:
    source = script_text("ops")
    import hashlib

    sha = hashlib.sha256(source.encode()).hexdigest()
    reqs = [{"id": 1, "call": "ops.hold", "kwargs": ["rm", "-rf", "/"], "sha": sha,
             "source": source},
            {"id": 2, "call": "ops.rm_rf", "kwargs": {"root": str(root)}, "sha": sha},
            {"id": 3, "call": "ops.hold", "kwargs": {"root": str(root), "x": "$(reboot)"},
             "sha": sha}]
    stdin = sized(script_text("agent")) + "".join(json.dumps(r) + "\n" for r in reqs).encode()
    p = subprocess.run([sys.executable, "-c", bootstrap("agent.py")], input=stdin,
                       capture_output=True, timeout=60)
    answers = {x.get("id"): x for x in map(json.loads, p.stdout.decode().splitlines())}
    assert answers[1]["exit"] == 2 and "kwargs" in answers[1]["stderr"]
    assert json.loads(answers[2]["stdout"])["outcome"] == "bad-call"
    assert json.loads(answers[3]["stdout"])["outcome"] == "bad-call"
    assert not (root / "rollout" / "hold").exists()


# ---------------------------------------------------------------- reads and tidying (issue 16)


def test_pointed_reads_current_and_previous_as_hostile_text(root: Path) -> None:
    assert call("pointed", root=str(root)) == {"outcome": "none", "reason": "current: none",
                                               "current": None, "previous": None}
    (root / "current").symlink_to(f"releases/{RELEASE}")
    (root / "rollout" / "previous_release").write_text("0123456789ab\n")
    out = call("pointed", root=str(root))
    assert (out["outcome"], out["current"], out["previous"]) == ("pointed", RELEASE,
                                                                 "0123456789ab")
    (root / "rollout" / "previous_release").write_text("$(reboot); ../../etc")
    assert call("pointed", root=str(root))["previous"] is None


def test_pointed_never_reads_previous_through_a_link(root: Path, tmp_path: Path) -> None:
    secret = tmp_path / "secret"
    secret.write_text("0123456789ab")
    (root / "rollout" / "previous_release").symlink_to(secret)
    assert call("pointed", root=str(root))["previous"] is None


def test_log_tail_keeps_the_last_lines_and_refuses_a_link(root: Path, tmp_path: Path) -> None:
    log = root / "rollout" / "daemon.log"
    log.write_text("".join(f"line {i}\n" for i in range(100)))
    out = call("log_tail", root=str(root), lines=3)
    assert out["outcome"] == "read" and out["text"] == "line 97\nline 98\nline 99\n"
    log.unlink()
    assert call("log_tail", root=str(root))["outcome"] == "none"
    secret = tmp_path / "secret"
    secret.write_text("password\n")
    log.symlink_to(secret)
    out = call("log_tail", root=str(root))
    assert out["outcome"] == "none" and "password" not in json.dumps(out)


def test_make_folder_makes_parents_once_and_refuses_a_link(root: Path, tmp_path: Path) -> None:
    where = root / "inputs" / "c1"
    assert call("make_folder", path=str(where))["outcome"] == "made" and where.is_dir()
    assert call("make_folder", path=str(where))["outcome"] == "kept"
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (root / "planted").symlink_to(elsewhere)
    out = call("make_folder", path=str(root / "planted" / "x"))
    assert out["outcome"] == "refused" and not (elsewhere / "x").exists()


def test_forget_validated_removes_a_link_never_its_target(root: Path, tmp_path: Path) -> None:
    evidence = root / "rollout" / "validated.json"
    assert call("forget_validated", root=str(root))["outcome"] == "none"
    evidence.write_text("{}")
    assert call("forget_validated", root=str(root))["outcome"] == "removed"
    assert not evidence.exists()
    precious = tmp_path / "precious"
    precious.write_text("x")
    evidence.symlink_to(precious)
    assert call("forget_validated", root=str(root))["outcome"] == "removed"
    assert not evidence.is_symlink() and precious.read_text() == "x"


def test_remove_partial_only_removes_an_upload_folder(root: Path, tmp_path: Path) -> None:
    partial = root / "releases" / ".partial-abc-1234"
    (partial / "sub").mkdir(parents=True)
    assert call("remove_partial", root=str(root), name=partial.name)["outcome"] == "removed"
    assert not partial.exists()
    assert call("remove_partial", root=str(root), name=partial.name)["outcome"] == "none"
    for hostile in (RELEASE, "../..", ".partial-/../..", ".partial-"):
        assert call("remove_partial", root=str(root), name=hostile)["outcome"] == "refused"
    assert (root / "releases" / RELEASE).is_dir()
    precious = tmp_path / "precious"
    precious.mkdir()
    (precious / "keep").write_text("x")
    partial.symlink_to(precious)
    assert call("remove_partial", root=str(root), name=partial.name)["outcome"] == "removed"
    assert (precious / "keep").exists()


def test_input_check_sizes_then_hashes_never_through_a_link(root: Path, tmp_path: Path) -> None:
    c1 = root / "c1.json"
    assert call("input_check", path=str(c1))["outcome"] == "missing"
    c1.write_bytes(b"proof input")
    out = call("input_check", path=str(c1), size=11)
    digest = hashlib.sha256(b"proof input").hexdigest()
    assert out["outcome"] == "present" and out["sha256"] == digest
    wrong = call("input_check", path=str(c1), size=12)
    assert (wrong["outcome"], wrong["size"], wrong["sha256"]) == ("wrong-size", 11, None)
    c1.unlink()
    c1.symlink_to(tmp_path / "elsewhere")
    (tmp_path / "elsewhere").write_bytes(b"proof input")
    assert call("input_check", path=str(c1), size=11)["outcome"] == "missing"


def test_probe_answers_input_status_and_owners_in_one_call(root: Path, status_port: int) -> None:
    (root / "c1.json").write_bytes(b"x")
    out = call("probe", input_path=str(root / "c1.json"), input_size=1,
               status_url=f"http://127.0.0.1:{status_port}/status", ports=[status_port],
               pid=os.getpid())
    assert out["input"]["outcome"] == "present"
    assert json.loads(out["status"]) == {"uptime_secs": 1.5}
    assert [o["pid"] for o in out["owners"]["ports"][str(status_port)]] == [os.getpid()]
    quiet = call("probe", input_path=str(root / "none"), status_url="", ports=[])
    assert (quiet["input"]["outcome"], quiet["status"], quiet["owners"]) == ("missing", None, None)


def test_stage_input_checks_the_digest_then_renames(root: Path, tmp_path: Path) -> None:
    partial, path = root / "c1.json.partial", root / "c1.json"
    partial.write_bytes(b"good")
    good = hashlib.sha256(b"good").hexdigest()
    bad = call("stage_input", partial=str(partial), path=str(path), sha256="0" * 64)
    assert bad["outcome"] == "mismatch" and not partial.exists() and not path.exists()
    partial.write_bytes(b"good")
    precious = tmp_path / "precious"
    precious.write_text("x")
    path.symlink_to(precious)  # a link in place of the input: replaced, never written through
    assert call("stage_input", partial=str(partial), path=str(path), sha256=good)["outcome"] \
        == "staged"
    assert not path.is_symlink() and path.read_bytes() == b"good" and precious.read_text() == "x"
    assert call("stage_input", partial=str(partial), path=str(path),
                sha256=good)["outcome"] == "missing"


def test_register_appends_the_start_line_once_to_the_onstart_script(root: Path) -> None:
    onstart = root / "onstart.sh"
    out = call("register", root=str(root), onstart=str(onstart))
    assert out["outcome"] == "registered" and out["how"] == f"on-start script {onstart}"
    call("register", root=str(root), onstart=str(onstart))  # a rerun adds nothing
    lines = onstart.read_text().splitlines()
    assert lines[0] == "#!/bin/sh" and len(lines) == 2
    assert lines[1].endswith(f"--daemonize # rollout-supervisor {root}")
    assert os.access(onstart, os.X_OK)
    assert (root / "rollout" / "registered").read_text() == f"on-start script {onstart}\n"


def test_register_never_writes_through_a_link_nor_splits_a_line(root: Path,
                                                                 tmp_path: Path) -> None:
    precious = tmp_path / "precious"
    precious.write_text("x")
    (root / "onstart.sh").symlink_to(precious)
    out = call("register", root=str(root), onstart=str(root / "onstart.sh"))
    assert out["outcome"] == "refused" and precious.read_text() == "x"
    hostile = call("register", root=f"{root}\nreboot", onstart=str(root / "other.sh"))
    assert hostile["outcome"] == "refused" and not (root / "other.sh").exists()


def test_a_calls_arguments_are_checked_as_inspect_would_without_importing_it() -> None:
    """ops.call checks the arguments from the function's code object: `import inspect` in
    every forked call cost a host 14 ms of CPU."""
    import inspect

    def refusal(fn: Any, kwargs: dict[str, Any]) -> str | None:
        try:
            inspect.signature(fn).bind(**kwargs)
        except TypeError:
            return "refused"
        return None

    cases: list[dict[str, Any]] = [{}, {"root": "/d"}, {"root": "/d", "release": "r"},
                                   {"root": "/d", "nope": 1}, {"root": "/d", "grace": 1.0}]
    for fn in ops.ACTIONS.values():
        for kwargs in cases:
            said = ops.misfit(fn, kwargs)
            assert (said and "refused") == refusal(fn, kwargs), (fn.__name__, kwargs, said)
    assert ops.misfit(ops.point_current, {"root": "/d"}) == (
        "missing a required argument: 'release'")
    assert "unexpected keyword argument 'rm'" in str(ops.misfit(ops.hold, {"root": "/d",
                                                                          "rm": "-rf /"}))


def test_a_holder_gone_before_it_is_described_holds_no_port(
    monkeypatch: pytest.MonkeyPatch
) -> None:
    """A fork of the daemon on its way to closing its descriptors holds the listening
    socket a moment (the lab stand-in's pool keeper did, once failing a start on a loaded
    machine as "held by pid 2738 (?, up Nones)"): seen in the fd scan, gone when described,
    it is no holder. One still there that is not the daemon's is named, its age said."""
    from rollout.host.scripts import common
    from rollout.steps.identity import identity_problem

    gone = 2**22 + 12345  # above any pid_max: no such process
    monkeypatch.setattr(common, "listening_inodes", lambda proc, ports: {9820: [111]})
    monkeypatch.setattr(common, "socket_holders",
                        lambda proc, inodes: {111: [os.getpid(), gone]})
    owners = common.ports_owners("/proc", [9820])[9820]
    assert [o["pid"] for o in owners] == [os.getpid()]
    stranger = {"pid": 7, "ancestors": [1], "cmdline": "", "age_secs": None}
    said = identity_problem(9820, [stranger], 5, 3.0, None)
    assert said is not None and "(?, age unknown)" in said and "Nones" not in said


def test_ready_judges_the_ports_by_the_one_look_it_reports(
    monkeypatch: pytest.MonkeyPatch
) -> None:
    """The daemon's fork (the lab's pool keeper, forked as a proof arrives at start-up) holds
    the listening socket a moment and is gone before a second look could find its parent:
    judged by the look `owners` reports, it is the daemon's child, not a stranger (ci19 failed
    a start once as "port(s) [9821] not held by daemon 6175"). A real stranger is named."""
    from rollout.host.scripts.actions import daemon

    me, gone = os.getpid(), 2**22 + 12345
    looks = iter([{9821: [{"pid": gone, "ancestors": [me, 1], "cmdline": "keeper",
                           "exe": None, "age_secs": 0.0}]}])
    monkeypatch.setattr(daemon, "ports_owners", lambda proc, ports: next(looks))
    out = daemon._ready("http://x/status", "{}", [9821], None, me, True, "/proc")
    assert out["outcome"] == "ready", out

    held = {"9821": [{"pid": 7, "ancestors": [1], "cmdline": "python3 x.py"}], "9820": []}
    assert daemon.strangers(held, me) == [9821, 9820]
    assert daemon._holders(held, [9821, 9820]) == (
        "9821 held by pid 7 (python3 x.py); 9820 held by no process")
