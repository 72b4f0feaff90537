"""No write follows a link (issue 18): the host helpers (common.safe_*), the files actions'
check and write, the lock, the facts' `current`, and the controller's report and journal
files."""

from __future__ import annotations

import json
import os
import pwd
import stat
from pathlib import Path

import pytest

from rollout.engine.locks import FoundLock, parse_holder
from rollout.errors import UserError
from rollout.host.scripts import common
from rollout.host.scripts.actions import facts as hostfacts
from rollout.host.scripts.actions import files, lock
from rollout.output.events import open_private
from rollout.output.journal import journal_path
from rollout.reports.output import append, write_atomic

SECRET = "precious: root's file, never written\n"


@pytest.fixture
def outside(tmp_path: Path) -> Path:
    """A file outside the tree rollout writes, with known content (a stand-in for /etc)."""
    target = tmp_path / "etc" / "shadow"
    target.parent.mkdir()
    target.write_text(SECRET)
    target.chmod(0o640)
    return target


@pytest.fixture
def root(tmp_path: Path) -> Path:
    """A clean layout root: root/rollout and root/releases, 0755."""
    r = tmp_path / "data"
    for d in (r, r / "rollout", r / "releases"):
        d.mkdir(mode=0o755)
        d.chmod(0o755)
    return r


def untouched(target: Path) -> bool:
    return target.read_text() == SECRET and stat.S_IMODE(target.stat().st_mode) == 0o640


def nobody() -> int:
    return pwd.getpwnam("nobody").pw_uid


# ---------------------------------------------------------------- common.safe_*


def test_safe_write_writes_whole_and_private(root: Path) -> None:
    path = root / "rollout" / "validated.json"
    common.safe_write(str(path), b'{"a": 1}\n')
    assert path.read_bytes() == b'{"a": 1}\n'
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert sorted(os.listdir(path.parent)) == ["validated.json"], "no temporary left"


@pytest.mark.parametrize("planted", ["validated.json", "validated.json.new"])
def test_safe_write_refuses_a_link_in_place_of_the_file_or_its_temporary(
    root: Path, outside: Path, planted: str
) -> None:
    path = root / "rollout" / "validated.json"
    (root / "rollout" / planted).symlink_to(outside)
    with pytest.raises(common.UnsafePath, match="is a symbolic link.*never writes through"):
        common.safe_write(str(path), b"evidence")
    assert untouched(outside)
    assert (root / "rollout" / planted).is_symlink(), "the link is left for a person to see"


def test_safe_write_refuses_a_linked_folder(root: Path, outside: Path) -> None:
    (root / "zk").symlink_to(outside.parent)
    with pytest.raises(common.UnsafePath, match="zk is a symbolic link"):
        common.safe_write(str(root / "zk" / "shadow"), b"toml")
    assert untouched(outside)


def test_safe_write_replaces_a_stale_regular_temporary(root: Path) -> None:
    path = root / "rollout" / "previous_release"
    (root / "rollout" / "previous_release.new").write_text("half")
    common.safe_write(str(path), b"r1")
    assert path.read_text() == "r1"
    assert not (root / "rollout" / "previous_release.new").exists()


def test_safe_append_and_open_refuse_a_link(root: Path, outside: Path) -> None:
    log = root / "rollout" / "exits.jsonl"
    log.symlink_to(outside)
    with pytest.raises(common.UnsafePath, match="symbolic link"):
        common.safe_append(str(log), "{}\n")
    with pytest.raises(common.UnsafePath, match="symbolic link"):
        common.safe_open(str(log), os.O_RDWR | os.O_CREAT)
    assert untouched(outside)
    fresh = root / "rollout" / "drains.jsonl"
    common.safe_append(str(fresh), "one\n", 0o644)
    common.safe_append(str(fresh), "two\n", 0o644)
    assert fresh.read_text() == "one\ntwo\n" and stat.S_IMODE(fresh.stat().st_mode) == 0o644


def test_safe_remove_removes_the_link_never_its_target(root: Path, outside: Path) -> None:
    link = root / "rollout" / "hold"
    link.symlink_to(outside)
    assert common.safe_remove(str(link)) is True
    assert not os.path.lexists(link) and untouched(outside)
    assert common.safe_remove(str(link)) is False


def test_safe_mkdir_makes_parents_and_refuses_a_linked_folder(root: Path, outside: Path) -> None:
    common.safe_mkdir(str(root / "rollout" / "runs" / "r1"), 0o700)
    assert stat.S_IMODE((root / "rollout" / "runs" / "r1").stat().st_mode) == 0o700
    (root / "rollout" / "staging").symlink_to(outside.parent)
    with pytest.raises(common.UnsafePath, match="staging is a symbolic link"):
        common.safe_mkdir(str(root / "rollout" / "staging" / "rel"))
    assert sorted(os.listdir(outside.parent)) == ["shadow"]


def test_ownership_problem_names_a_foreign_owner_and_open_modes(root: Path) -> None:
    assert common.ownership_problem(str(root), "rollout's root") is None
    os.chown(root / "rollout", nobody(), -1)
    assert "owned by uid" in (common.ownership_problem(str(root / "rollout"), "x") or "")
    os.chown(root / "rollout", 0, -1)
    (root / "rollout").chmod(0o777)
    assert "group- or world-writable (mode 0777)" in (
        common.ownership_problem(str(root / "rollout"), "x") or "")
    assert common.ownership_problem(str(root / "missing"), "x") is None


# ---------------------------------------------------------------- check_root and write_file


def test_check_passes_a_clean_tree(root: Path) -> None:
    (root / "releases" / "r1").mkdir()
    (root / "current").symlink_to("releases/r1")
    (root / "rollout" / "supervisor.py").write_text("# supervisor\n")
    assert files.check(str(root), [str(root / "zk" / "cuzk.toml")]) == []


def test_check_names_every_planted_link_and_foreign_owner(root: Path, outside: Path) -> None:
    state = root / "rollout"
    for name in ("lock", "validated.json.new", "daemon.pid"):
        (state / name).symlink_to(outside)
    (state / "staging").symlink_to(outside.parent)
    (state / "runs").mkdir()
    (state / "runs" / "guard.jsonl").symlink_to(outside)
    (root / "releases" / "r9").symlink_to(outside.parent)
    (root / "zk").mkdir()
    (root / "zk" / "cuzk.toml.new").symlink_to(outside)
    sup = state / "supervisor.py"
    sup.write_text("# not root's\n")
    os.chown(sup, nobody(), -1)
    (root / "current").symlink_to(outside.parent)
    problems = "\n".join(files.check(str(root), [str(root / "zk" / "cuzk.toml"),
                                                 str(root / "zk" / "cuzk.toml.new")]))
    for name in ("rollout/lock", "validated.json.new", "daemon.pid", "rollout/staging",
                 "runs/guard.jsonl", "releases/r9", "zk/cuzk.toml.new"):
        assert f"{name} is a symbolic link" in problems, name
    assert "supervisor.py is owned by uid" in problems
    assert "current points outside" in problems
    assert untouched(outside)


def test_check_refuses_a_world_writable_root(root: Path) -> None:
    root.chmod(0o777)
    assert any("group- or world-writable" in p for p in files.check(str(root), []))


def test_write_keeps_the_old_copy_and_skips_the_same_text(root: Path) -> None:
    path, kept = str(root / "cuzk.toml"), str(root / "cuzk.toml.for-r1")
    assert files.write(path, b"one", kept, if_changed=True) == {"ok": True, "changed": True}
    assert files.write(path, b"one", kept, if_changed=True) == {"ok": True, "changed": False}
    assert files.write(path, b"two", kept, if_changed=True)["changed"]
    assert Path(kept).read_text() == "one" and Path(path).read_text() == "two"
    assert files.copy(kept, path)["changed"] and Path(path).read_text() == "one"


def test_write_file_refuses_a_link_with_the_reason(root: Path, outside: Path) -> None:
    (root / "cuzk.toml").symlink_to(outside)
    out = files.write_file(str(root / "cuzk.toml"), "[daemon]\n")
    assert out["outcome"] == "refused" and out["ok"] is False
    assert "cuzk.toml is a symbolic link" in out["refused"]
    assert untouched(outside)


# ---------------------------------------------------------------- the lock, the facts


def test_a_linked_lock_is_not_read_and_its_target_never_echoed(root: Path, outside: Path) -> None:
    path = root / "rollout" / "lock"
    path.symlink_to(outside)
    found = lock.found(str(path))
    assert found is not None and "precious" not in json.dumps(found)
    assert "symbolic link" in found["problem"]
    holder = FoundLock.read("h1", found).holder
    assert isinstance(holder, str) and "not rollout's lock" in holder
    assert lock.act("break", str(path), {"run_id": "a"}, found["sha256"])["ok"]
    assert untouched(outside) and json.loads(path.read_text())["run_id"] == "a"


def test_a_lock_that_is_not_json_says_its_size_never_its_bytes(root: Path) -> None:
    path = root / "rollout" / "lock"
    path.write_text("ssh-rsa AAAA secret-ish\n")
    found = lock.found(str(path))
    assert found is not None and found["text"] == ""
    assert found["problem"] == "not rollout's lock (24 bytes, not JSON)"
    assert parse_holder("ssh-rsa AAAA") == "not rollout's lock (12 bytes, not JSON)"


def test_lock_refuses_a_linked_state_folder(tmp_path: Path, outside: Path) -> None:
    data = tmp_path / "data"
    data.mkdir()
    (data / "rollout").symlink_to(outside.parent)
    out = lock.lock(str(data), "take", {"run_id": "a"})
    assert out["ok"] is False and "symbolic link" in out["refused"]
    assert sorted(os.listdir(outside.parent)) == ["shadow"]


def test_current_outside_releases_is_no_release(root: Path, outside: Path) -> None:
    (root / "current").symlink_to(outside.parent)
    got = hostfacts.facts(str(root))
    assert got["current_release"] is None
    assert "points outside" in got["errors"]["current_release"]
    (root / "current").unlink()
    (root / "current").symlink_to("releases/r1")
    got = hostfacts.facts(str(root))
    assert got["current_release"] == "r1"


# ---------------------------------------------------------------- controller files


def test_reports_and_journals_refuse_a_link_and_are_private(tmp_path: Path,
                                                            outside: Path) -> None:
    link = tmp_path / "report.json"
    link.symlink_to(outside)
    for write in (lambda: open_private(link, append=True), lambda: open_private(link),
                  lambda: write_atomic(link, "x"), lambda: append(link, "x")):
        with pytest.raises(UserError, match="is a symbolic link"):
            write()
    assert untouched(outside)
    plain = tmp_path / "junit.xml"
    write_atomic(plain, "<x/>")
    append(tmp_path / "summary.md", "# s\n")
    for path in (plain, tmp_path / "summary.md"):
        assert stat.S_IMODE(path.stat().st_mode) == 0o600


@pytest.mark.parametrize("bad", ["../etc/passwd", "a/b", "..", "-rf", ".hidden", "x\ny", ""])
def test_run_ids_never_become_paths(tmp_path: Path, bad: str) -> None:
    with pytest.raises(UserError, match="not a run id"):
        journal_path(tmp_path, bad)
    assert journal_path(tmp_path, "20261201-120000-abc123") == (
        tmp_path / "20261201-120000-abc123.jsonl")


# ---------------------------------------------------------------- staging ahead


def test_staging_never_acts_through_a_linked_folder(root: Path, outside: Path) -> None:
    """A staging root that is a link: the survey removes nothing in the folder it points
    at, names the link, and the stager stages nothing there; unstaging removes nothing."""
    from rollout.host.scripts import ops

    (outside.parent / "r2").mkdir()
    (outside.parent / "stale-release").mkdir()
    (root / "rollout" / "staging").symlink_to(outside.parent)
    out = ops.staging_survey(str(root), "r2", ["cuzk-daemon"])
    assert out["links"] == [f"{root}/rollout/staging"] and out["stale"] == []
    assert ops.unstage(str(root), "r2")["outcome"] == "refused"
    assert sorted(os.listdir(outside.parent)) == ["r2", "shadow", "stale-release"]
    assert untouched(outside)


# ---------------------------------------------------------------- running the supervisor


def test_the_supervisor_is_run_only_from_a_tree_others_cannot_write(root: Path) -> None:
    """ops.run_supervisor, as the supervise step calls it before python3 supervisor.py."""
    from rollout.host.scripts import ops

    sup = root / "rollout" / "supervisor.py"
    sup.write_text("# supervisor\n")
    sup.chmod(0o600)

    def verdict() -> tuple[int, str]:
        out = ops.run_supervisor(root=str(root))
        return (0 if out["outcome"] == "started" else 1), str(out["reason"])

    assert verdict() == (0, "supervisor started")
    os.chown(sup, nobody(), -1)
    code, why = verdict()
    assert code != 0 and f"{sup} is owned by uid" in why and "refused to run" in why
    os.chown(sup, 0, -1)
    sup.chmod(0o666)
    assert verdict()[0] != 0
    sup.chmod(0o600)
    root.chmod(0o777)
    assert str(root) in verdict()[1]
    root.chmod(0o755)
    sup.unlink()
    sup.symlink_to("/etc/hostname")
    assert verdict()[0] != 0


def test_the_guard_never_runs_a_supervisor_others_may_write(root: Path) -> None:
    from rollout.host.scripts import ops

    (root / "releases" / "r1").mkdir()
    (root / "current").symlink_to("releases/r1")
    sup = root / "rollout" / "supervisor.py"
    sup.write_text("raise SystemExit('never run')\n")
    os.chown(sup, nobody(), -1)
    out = ops.start(root=str(root), wait=0.1)  # the start the guard and the start step call
    assert out["outcome"] == "refused" and "supervisor.py is owned by uid" in out["reason"]
