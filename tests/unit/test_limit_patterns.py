"""`--limit` picks the hosts `ansible-playbook --limit PATTERN --list-hosts` picks, on the
Ansible example inventories of tests/unit/inventories/ (separators, `!`, `&`, globs,
`~regex`, `all`, `@FILE`, subscripts). Where Ansible warns "Could not match supplied host
pattern" and goes on, rollout stops naming the pattern (exit 2).

Ansible's answers are recorded in tests/unit/fixtures/ansible-limit.json, so this tier starts
no Ansible process; the slow test asks ansible-playbook again. After changing PATTERNS or
pinning another ansible-core, record again: python tests/unit/test_limit_patterns.py
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
from ansible_recordings import CASES, inventory_of

from rollout.config.inventory import load_inventory
from rollout.config.limit import Universe, select, split
from rollout.errors import UserError

RECORDED = Path(__file__).parent / "fixtures" / "ansible-limit.json"
ANSIBLE_PLAYBOOK = Path(sys.executable).parent / "ansible-playbook"
LIMIT_FILE = "limit.txt"
LIMIT_TEXT = "prod\n\n  !one.example.com  \n"
PATTERNS: dict[str, list[str]] = {
    "doc-children-yaml": [
        "prod", "prod:!east", "prod,!east", "webservers:&prod", "&prod:webservers",
        "!east", "&west", "*.example.com:!one*", "~(foo|bar)\\.", "~.*ne", "all:!ungrouped",
        "ungrouped", "al*", "dbservers[0]", "dbservers[-1]", "dbservers[1:2]", "dbservers[1:]",
        "dbservers[2:0]", "east,west:&webservers", "foo.example.com:bar.example.com",
        "prod:nope", "nope", "prod:!prod", "t??t", "mail.example.com:22",
        f"@{LIMIT_FILE}", f"@{LIMIT_FILE},west",
    ],
    "doc-environments-ini": [
        "dc1", "dc1:&appservers", "appservers:!dc1", "app*:!app01*", "~db0[12]",
        "appservers[1]", "appservers[0:1]", "dc*", "dbservers,dc2", "&dc1", "!dc2",
    ],
    "doc-subgroups-yaml": [
        "all", "*", "prod:&web*", "~^(?!db).*", "!test", "test[0]", "atlanta:raleigh",
    ],
}


def ask_ansible(case: str, pattern: str) -> dict[str, list[str]]:
    """`ansible-playbook -i INVENTORY --limit PATTERN --list-hosts` of a play on `all`: the
    hosts it lists and the patterns it could not match."""
    inventory = inventory_of(CASES / case).absolute()
    with tempfile.TemporaryDirectory(prefix="ansible-") as tmp:
        Path(tmp, "ansible.cfg").write_text("")
        Path(tmp, "play.yml").write_text("- hosts: all\n  gather_facts: false\n  tasks: []\n")
        Path(tmp, LIMIT_FILE).write_text(LIMIT_TEXT)
        env = {"PATH": os.environ.get("PATH", ""), "HOME": tmp, "LANG": "C.UTF-8",
               "ANSIBLE_CONFIG": f"{tmp}/ansible.cfg", "ANSIBLE_HOME": f"{tmp}/home",
               "ANSIBLE_LOCAL_TEMP": f"{tmp}/tmp", "ANSIBLE_NOCOLOR": "1",
               "ANSIBLE_INVENTORY_ENABLED": "ini,yaml"}  # fmt: skip
        done = subprocess.run([str(ANSIBLE_PLAYBOOK), "-i", str(inventory), "--limit", pattern,
                               "--list-hosts", "play.yml"], env=env, cwd=tmp,
                              capture_output=True, text=True, timeout=120)  # fmt: skip
    listed = done.stdout.split("hosts (", 1)[1].splitlines()[1:] if "hosts (" in done.stdout \
        else []  # fmt: skip
    unmatched = re.findall(r"Could not match supplied host pattern, ignoring: (\S+)",
                           done.stderr)  # fmt: skip
    return {"hosts": sorted(h.strip() for h in listed if h.strip()), "unmatched": unmatched}


def ask_all() -> dict[str, dict[str, Any]]:
    jobs = [(case, p) for case, patterns in PATTERNS.items() for p in patterns]
    with ThreadPoolExecutor(max_workers=os.cpu_count() or 2) as pool:
        answers = list(pool.map(lambda job: ask_ansible(*job), jobs))
    out: dict[str, dict[str, Any]] = {case: {} for case in PATTERNS}
    for (case, pattern), answer in zip(jobs, answers, strict=True):
        out[case][pattern] = answer
    return out


def recorded() -> dict[str, dict[str, Any]]:
    return dict(json.loads(RECORDED.read_text()))


CASE_PATTERNS = [(case, p) for case, patterns in PATTERNS.items() for p in patterns]


@pytest.mark.parametrize(("case", "pattern"), CASE_PATTERNS)
def test_limit_picks_what_ansible_playbook_lists(
    case: str, pattern: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.chdir(tmp_path)
    (tmp_path / LIMIT_FILE).write_text(LIMIT_TEXT)
    inventory = load_inventory(inventory_of(CASES / case))
    answer = recorded()[case][pattern]
    if answer["unmatched"]:
        with pytest.raises(UserError, match="matches no host or group") as caught:
            inventory.select(pattern)
        assert repr(answer["unmatched"][0]) in str(caught.value)
        assert caught.value.exit_code == 2
    elif not answer["hosts"]:
        with pytest.raises(UserError, match="leaves no host"):
            inventory.select(pattern)
    else:
        assert sorted(h.name for h in inventory.select(pattern)) == answer["hosts"]


def test_every_pattern_has_its_recording() -> None:
    want = {c: sorted(p) for c, p in PATTERNS.items()}
    got = {c: sorted(p) for c, p in recorded().items()}
    assert got == want, "record: python tests/unit/test_limit_patterns.py"


@pytest.mark.slow
def test_ansible_playbook_still_answers_as_recorded() -> None:
    if not ANSIBLE_PLAYBOOK.exists():
        pytest.fail("ansible-playbook is not installed (pip install -e '.[dev]')")
    assert ask_all() == recorded(), "record: python tests/unit/test_limit_patterns.py"


UNIVERSE = Universe(["a1", "a2", "b1", "c"], {"all": ["a1", "a2", "b1", "c"],
                    "ungrouped": ["c"], "a": ["a1", "a2"], "b": ["b1"]})  # fmt: skip


@pytest.mark.parametrize(("limit", "parts"), [
    ("a:b", ["a", "b"]), ("a,b:c", ["a", "b:c"]), (" a , b ", ["a", "b"]),
    ("g[1:3]:h", ["g[1:3]", "h"]), ("host:22", ["host:22"]), ("fe80::1", ["fe80::1"]),
    ("a:!b:&c", ["a", "!b", "&c"]), ("", []), ("db:cafe:ef", ["db", "cafe", "ef"]),
    ("[fe80::1]:22", ["[fe80::1]:22"]),
])  # fmt: skip
def test_split_reads_separators_as_ansible(limit: str, parts: list[str]) -> None:
    assert split(limit) == parts
    manager = pytest.importorskip("ansible.inventory.manager")  # the pinned ansible-core
    assert manager.split_host_pattern(limit) == parts


@pytest.mark.parametrize(("limit", "why"), [
    ("~(", "is not a regex"), ("~" + "a" * 300, "longer than 256"),
    ("a[5]", "no host at that position"), ("a:zz", "'zz' matches no host or group"),
    ("a:!zz", "'zz' matches no host or group"), ("@/nonexistent/limit", "not found"),
])  # fmt: skip
def test_a_bad_pattern_is_refused_by_name(limit: str, why: str) -> None:
    with pytest.raises(UserError, match=re.escape(why)) as caught:
        select(UNIVERSE, limit)
    assert caught.value.exit_code == 2


def test_a_limit_file_names_its_file_and_line(tmp_path: Path) -> None:
    file = tmp_path / "limit"
    file.write_text("a\n\n!b1\nzz\n")
    with pytest.raises(UserError, match=f"{re.escape(str(file))}:4: 'zz' matches no host"):
        select(UNIVERSE, f"@{file}")
    file.write_text("a\n!a2\n")
    assert select(UNIVERSE, f"@{file},b") == ["a1", "b1"]
    (tmp_path / "fifo").mkdir()
    with pytest.raises(UserError, match="folder"):
        select(UNIVERSE, f"@{tmp_path / 'fifo'}")


def test_refused_hosts_are_picked_by_the_same_matcher(tmp_path: Path) -> None:
    inventory = tmp_path / "hosts"
    inventory.write_text("[gpu]\ngpu-1\ngpu-2\n[cpu]\ncpu-1\n")
    (tmp_path / "host_vars").mkdir()
    os.mkfifo(tmp_path / "host_vars" / "gpu-2")  # unreadable: gpu-2 alone is refused
    loaded = load_inventory(inventory)
    assert list(loaded.refused) == ["gpu-2"]
    assert list(loaded.refused_in("gpu-*:!gpu-1")) == ["gpu-2"]
    assert [h.name for h in loaded.select("gpu-*:!gpu-1")] == []
    assert list(loaded.refused_in("~gpu:&cpu")) == []
    assert list(loaded.refused_in(None)) == ["gpu-2"]


if __name__ == "__main__":
    RECORDED.write_text(json.dumps(ask_all(), indent=1, sort_keys=True) + "\n")
    print(RECORDED)
