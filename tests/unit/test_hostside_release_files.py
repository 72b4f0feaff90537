"""ops.py's actions on a release's files and the config step's folders (issue 16: what was
shell text the steps sent), run as a host without an agent runs them, on a temporary root:
hostile names, a link where a folder or file of rollout's is expected, a missing file."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import stat
from pathlib import Path

import pytest
from test_hostside_ops import call

RELEASE = "abcdefabcdef"
NAMES = ["cuzk-daemon", "cuzk-bench"]


@pytest.fixture
def root(tmp_path: Path) -> Path:
    r = tmp_path / "data"
    (r / "releases").mkdir(parents=True)
    (r / "rollout").mkdir()
    return r


@pytest.fixture
def precious(tmp_path: Path) -> Path:
    """A folder outside the root with a file in it, which nothing may touch."""
    p = tmp_path / "precious"
    p.mkdir()
    (p / "keep").write_text("x")
    (p / "keep").chmod(0o644)
    return p


def _files(folder: Path) -> dict[str, str]:
    folder.mkdir(parents=True, exist_ok=True)
    for name in NAMES:
        (folder / name).write_bytes(name.encode() * 100)
    return {n: hashlib.sha256(n.encode() * 100).hexdigest() for n in NAMES}


def _identity(path: Path) -> str:
    st = path.lstat()
    return f"{st.st_size} {st.st_ino} {st.st_dev} {st.st_mtime_ns} {st.st_ctime_ns}"


# ---------------------------------------------------------------- the config step


def test_config_folders_made_and_kept_copies_private(root: Path, precious: Path) -> None:
    config, cache = root / "zk" / "cuzk.toml", root / "zk" / "params"
    out = call("config_folders", config_path=str(config), param_cache=str(cache))
    assert out["outcome"] == "made" and config.parent.is_dir() and cache.is_dir()
    kept = root / "zk" / "cuzk.toml.for-abc"
    kept.write_text("secret = 1\n")
    kept.chmod(0o644)
    (root / "zk" / "cuzk.toml.for-link").symlink_to(precious / "keep")
    out = call("config_folders", config_path=str(config), param_cache=str(cache))
    assert out["outcome"] == "kept" and "1 kept config(s) private" in out["reason"]
    assert stat.S_IMODE(kept.stat().st_mode) == 0o600
    assert stat.S_IMODE((precious / "keep").stat().st_mode) == 0o644  # never through a link


def test_config_folders_take_a_linked_param_cache_never_a_linked_config_folder(
    root: Path, precious: Path
) -> None:
    cache = root / "params"
    cache.symlink_to(precious)  # params on a disk of their own: as fetch.py takes them
    config = root / "zk" / "cuzk.toml"
    out = call("config_folders", config_path=str(config), param_cache=str(cache))
    assert out["outcome"] == "made" and config.parent.is_dir() and cache.is_symlink()
    other = root / "other"
    other.symlink_to(precious)
    out = call("config_folders", config_path=str(other / "cuzk.toml"),
               param_cache=str(root / "p2"))
    assert out["outcome"] == "refused" and "symbolic link" in out["reason"]
    assert sorted(os.listdir(precious)) == ["keep"]


def test_remove_files_removes_a_link_never_its_target(root: Path, precious: Path) -> None:
    kept = [root / "cuzk.toml.for-a", root / "cuzk.toml.for-b", root / "cuzk.toml.for-c"]
    kept[0].write_text("x")
    kept[1].symlink_to(precious / "keep")
    out = call("remove_files", paths=[str(p) for p in kept])  # the third is missing: fine
    assert out["outcome"] == "removed" and out["removed"] == [str(p) for p in kept[:2]]
    assert not any(os.path.lexists(p) for p in kept) and (precious / "keep").exists()
    assert call("remove_files", paths=[str(kept[0])])["outcome"] == "none"
    (root / "folder").mkdir()
    out = call("remove_files", paths=[str(root / "folder")])
    assert out["outcome"] == "failed" and (root / "folder").is_dir()


# ---------------------------------------------------------------- a release's files


def test_file_sums_hash_plain_names_never_a_link_or_a_path(root: Path, precious: Path) -> None:
    folder = root / "releases" / ".partial-x"
    want = _files(folder)
    (folder / "linked").symlink_to(precious / "keep")
    names = [*NAMES, "linked", "missing", "../precious/keep", "..", "a/b"]
    out = call("file_sums", directory=str(folder), names=names, mode=0o755)
    assert out["sums"] == {**want, "linked": None, "missing": None}
    assert all(stat.S_IMODE((folder / n).stat().st_mode) == 0o755 for n in NAMES)
    assert stat.S_IMODE((precious / "keep").stat().st_mode) == 0o644


def test_identities_of_files_never_through_a_link(root: Path, precious: Path) -> None:
    folder = root / "rollout" / "staging" / RELEASE
    _files(folder)
    (folder / "linked").symlink_to(precious / "keep")
    out = call("identities", directory=str(folder), names=[*NAMES, "linked", "gone"],
               evict=True)
    assert out["identities"] == {**{n: _identity(folder / n) for n in NAMES}, "linked": None,
                                 "gone": None}
    (root / "elsewhere").symlink_to(folder)
    out = call("identities", directory=str(root / "elsewhere"), names=NAMES)
    assert out["outcome"] == "refused" and out["identities"] == {}


def test_read_release_reads_its_manifest_and_hashes_what_it_lists(root: Path,
                                                                  precious: Path) -> None:
    assert call("read_release", root=str(root), release=RELEASE)["outcome"] == "missing"
    where = root / "releases" / RELEASE
    want = _files(where)
    listed = {n: {"sha256": s} for n, s in want.items()} | {"../../precious/keep": {}}
    (where / "RELEASE.json").write_text(json.dumps({"artifacts": listed}))
    out = call("read_release", root=str(root), release=RELEASE)
    assert out["outcome"] == "read" and json.loads(out["manifest"])["artifacts"] == listed
    assert out["sums"] == want  # a listed path is never read
    (where / "RELEASE.json").unlink()
    (where / "RELEASE.json").symlink_to(precious / "keep")
    assert call("read_release", root=str(root), release=RELEASE)["outcome"] == "missing"
    for hostile in ("../releases", ".hidden", "a/b", ""):
        assert call("read_release", root=str(root), release=hostile)["outcome"] == "refused"


def test_install_release_renames_the_folder_over_a_planted_link(root: Path,
                                                                precious: Path) -> None:
    partial = root / "releases" / ".partial-abc-1"
    _files(partial)
    dest = root / "releases" / RELEASE
    dest.symlink_to(precious)  # an old release that is a link: the link goes, never its target
    out = call("install_release", root=str(root), release=RELEASE, partial=str(partial),
               manifest='{"id": "x"}', names=NAMES)
    assert out["outcome"] == "installed", out
    assert dest.is_dir() and not dest.is_symlink() and not partial.exists()
    assert (dest / "RELEASE.json").read_text() == '{"id": "x"}'
    assert out["identities"] == {n: _identity(dest / n) for n in NAMES}
    assert sorted(os.listdir(precious)) == ["keep"]


def test_install_release_refuses_a_linked_manifest_or_partial_folder(root: Path,
                                                                     precious: Path) -> None:
    partial = root / "releases" / ".partial-abc-2"
    _files(partial)
    (partial / "RELEASE.json").symlink_to(precious / "keep")
    out = call("install_release", root=str(root), release=RELEASE, partial=str(partial),
               manifest="{}", names=NAMES)
    assert out["outcome"] == "failed" and (precious / "keep").read_text() == "x"
    assert not (root / "releases" / RELEASE).exists()
    linked = root / "releases" / ".partial-abc-3"
    linked.symlink_to(precious)
    out = call("install_release", root=str(root), release=RELEASE, partial=str(linked),
               manifest="{}", names=NAMES)
    assert out["outcome"] == "missing" and sorted(os.listdir(precious)) == ["keep"]
    out = call("install_release", root=str(root), release="../x", partial=str(partial),
               manifest="{}", names=NAMES)
    assert out["outcome"] == "refused"


def test_a_staged_folder_changed_since_is_removed_not_installed(root: Path) -> None:
    staged = root / "rollout" / "staging" / RELEASE
    _files(staged)
    expect = {n: _identity(staged / n) for n in NAMES}
    (staged / NAMES[0]).write_bytes(b"changed")
    out = call("install_release", root=str(root), release=RELEASE, partial=str(staged),
               manifest="{}", names=NAMES, expect=expect)
    assert out["outcome"] == "changed"
    assert not (root / "rollout" / "staging").exists()  # the empty staging folder went too
    assert not (root / "releases" / RELEASE).exists()
    _files(staged)
    expect = {n: _identity(staged / n) for n in NAMES}
    out = call("install_release", root=str(root), release=RELEASE, partial=str(staged),
               manifest="{}", names=NAMES, expect=expect)
    assert out["outcome"] == "installed" and not (root / "rollout" / "staging").exists()
    assert out["identities"] == expect  # a rename keeps each file's identity


# ---------------------------------------------------------------- staging ahead and pulls


def test_staging_survey_clears_stale_staging_and_sees_a_present_release(root: Path) -> None:
    staging = root / "rollout" / "staging"
    _files(staging / "fedcba987654")
    _files(staging / RELEASE)
    out = call("staging_survey", root=str(root), release=RELEASE, names=NAMES)
    assert (out["outcome"], out["stale"], out["links"]) == ("surveyed", ["fedcba987654"], [])
    assert out["present"] is False and out["same_device"] is True
    assert os.listdir(staging) == []  # its own earlier staging too: staged afresh
    where = root / "releases" / RELEASE
    _files(where)
    (where / "RELEASE.json").write_text("{}")
    assert call("staging_survey", root=str(root), release=RELEASE, names=NAMES)["present"]
    out = call("staging_survey", root=str(root), release="..", names=NAMES)
    assert out["outcome"] == "refused"


def test_unstage_removes_the_staging_and_never_acts_through_a_linked_state_folder(
    tmp_path: Path, precious: Path
) -> None:
    root = tmp_path / "data"
    _files(root / "rollout" / "staging" / RELEASE)
    assert call("unstage", root=str(root), release=RELEASE)["outcome"] == "removed"
    assert not (root / "rollout" / "staging").exists()
    assert call("unstage", root=str(root), release=RELEASE)["outcome"] == "none"
    (root / "rollout").rename(tmp_path / "state")
    (root / "rollout").symlink_to(precious)
    (precious / "staging" / RELEASE).mkdir(parents=True)
    out = call("unstage", root=str(root), release=RELEASE)
    assert out["outcome"] == "refused" and (precious / "staging" / RELEASE).is_dir()


def test_pull_folder_abandons_other_pulls_and_keeps_its_own(root: Path, precious: Path) -> None:
    releases = root / "releases"
    mine, other = releases / f".partial-{RELEASE}-pull", releases / ".partial-0123-pull"
    (mine / "cuzk-daemon").parent.mkdir()
    (mine / "cuzk-daemon").write_text("half")
    other.mkdir()
    (releases / ".partial-link-pull").symlink_to(precious)
    (releases / ".partial-upload-1").mkdir()  # an upload's: not a pull's, left alone
    out = call("pull_folder", root=str(root), name=mine.name)
    assert out["outcome"] == "kept" and (mine / "cuzk-daemon").read_text() == "half"
    assert sorted(os.listdir(releases)) == [mine.name, ".partial-upload-1"]
    assert sorted(os.listdir(precious)) == ["keep"]
    for hostile in ("../x-pull", RELEASE, ".partial-a/../../x-pull"):
        assert call("pull_folder", root=str(root), name=hostile)["outcome"] == "refused"


# ---------------------------------------------------------------- what preflight reads


def test_ldd_reads_each_executable_in_one_call(tmp_path: Path) -> None:
    release = tmp_path / "releases" / RELEASE
    release.mkdir(parents=True)
    true = Path(shutil.which("true") or "/bin/true")
    (release / "cuzk-daemon").write_bytes(true.read_bytes())
    (release / "cuzk-daemon").chmod(0o755)
    (release / "cuzk-bench").write_text("not an executable")
    out = call("ldd", directory=str(release), names=[*NAMES, "../../etc/passwd"])
    assert out["outcome"] == "read" and sorted(out["outputs"]) == sorted(NAMES)
    assert "libc" in out["outputs"]["cuzk-daemon"]
    assert "not a dynamic executable" in out["outputs"]["cuzk-bench"]
    assert call("ldd", directory=str(tmp_path / "gone"), names=NAMES)["outcome"] == "missing"
    (tmp_path / "linked").symlink_to(release)
    assert call("ldd", directory=str(tmp_path / "linked"), names=NAMES)["outcome"] == "missing"


def test_cpu_info_marker_and_gpus_as_data(tmp_path: Path) -> None:
    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text("processor\t: 0\nflags\t\t: fpu adx\nprocessor\t: 1\nflags\t\t: fpu\n")
    assert call("cpu_info", path=str(cpuinfo))["text"] == "flags\t\t: fpu adx"
    assert call("cpu_info", path=str(tmp_path / "none"))["outcome"] == "none"
    marker = tmp_path / "marker"
    assert call("file_present", path=str(marker))["outcome"] == "missing"
    marker.write_text("")
    assert call("file_present", path=str(marker))["outcome"] == "present"
    out = call("gpus", timeout=30)  # no nvidia-smi here: said as data, never a crash
    assert isinstance(out["exit"], int) and isinstance(out["output"], str)
    if not shutil.which("nvidia-smi"):
        assert out["exit"] == 127 and out["output"] == "nvidia-smi: not found"
