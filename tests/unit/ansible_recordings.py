"""ansible-inventory's answers for each case under tests/unit/inventories/, recorded.

The unit tests compare rollout's reading of each inventory with what the pinned ansible-core
answered (`ansible-inventory --list` and `--graph`), kept under tests/unit/fixtures/ansible/,
so the fast tier starts no Ansible process. A `slow` test (test_ansible_recordings_current.py)
runs ansible-inventory again and checks every recording is current. After adding or changing
a case, or pinning another ansible-core, record them again:

    python tests/unit/ansible_recordings.py
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

CASES = Path(__file__).parent / "inventories"
RECORDINGS = Path(__file__).parent / "fixtures" / "ansible"
NOT_INVENTORY = {"group_vars", "host_vars", "refused.txt"}
ANSIBLE_INVENTORY = Path(sys.executable).parent / "ansible-inventory"


@dataclass(frozen=True)
class Answer:
    """What ansible-inventory printed for one inventory, as it printed it: --list, --graph."""

    list_text: str
    graph: str

    @property
    def listing(self) -> dict[str, Any]:
        return dict(json.loads(self.list_text))


def inventory_of(case: Path) -> Path:
    (file,) = [p for p in case.iterdir() if p.name not in NOT_INVENTORY]
    return file


def cases(refused: bool) -> list[str]:
    return sorted(p.name for p in CASES.iterdir() if (p / "refused.txt").exists() == refused)


def list_file(case: str) -> Path:
    return RECORDINGS / f"{case}.list.json"


def graph_file(case: str) -> Path:
    return RECORDINGS / f"{case}.graph.txt"


def files_of(case: str) -> tuple[Path, Path]:
    return list_file(case), graph_file(case)


def recorded(case: str) -> Answer:
    """The recorded answer for a case (see the module's docstring to record them)."""
    return Answer(list_file(case).read_text(), graph_file(case).read_text())


def ansible_inventory_exe() -> str | None:
    if ANSIBLE_INVENTORY.exists():
        return str(ANSIBLE_INVENTORY)
    return shutil.which("ansible-inventory")


def ask_ansible(case: str) -> Answer:
    """`ansible-inventory -i FILE --list` and `--graph`, with no config, home or temp writes
    outside a temporary folder, run from the case's folder so no path of this checkout
    enters the answer."""
    exe = ansible_inventory_exe()
    if exe is None:
        raise RuntimeError("ansible-inventory is not installed (pip install -e '.[dev]')")
    with tempfile.TemporaryDirectory(prefix="ansible-") as tmp:
        (Path(tmp) / "ansible.cfg").write_text("")
        env = {
            "PATH": os.environ.get("PATH", ""), "HOME": tmp, "LANG": "C.UTF-8",
            "ANSIBLE_CONFIG": f"{tmp}/ansible.cfg", "ANSIBLE_HOME": f"{tmp}/home",
            "ANSIBLE_LOCAL_TEMP": f"{tmp}/tmp", "ANSIBLE_INVENTORY_ENABLED": "ini,yaml",
            "ANSIBLE_INVENTORY_UNPARSED_FAILED": "1", "ANSIBLE_NOCOLOR": "1",
        }  # fmt: skip
        name = inventory_of(CASES / case).name
        out = {
            flag: subprocess.run([exe, "-i", name, flag], env=env, cwd=CASES / case,
                                 capture_output=True, text=True, timeout=120, check=True).stdout
            for flag in ("--list", "--graph")
        }  # fmt: skip
    return Answer(out["--list"], out["--graph"])


def ask_ansible_all(names: list[str]) -> dict[str, Answer]:
    """ansible-inventory's answer for each case, run side by side (one process each)."""
    with ThreadPoolExecutor(max_workers=os.cpu_count() or 2) as pool:
        return dict(zip(names, pool.map(ask_ansible, names), strict=True))


def record_all() -> list[Path]:
    """Write the recordings of every case rollout reads; remove those of no case."""
    RECORDINGS.mkdir(parents=True, exist_ok=True)
    names = cases(refused=False)
    written: list[Path] = []
    for case, answer in ask_ansible_all(names).items():
        list_file(case).write_text(answer.list_text)
        graph_file(case).write_text(answer.graph)
        written += files_of(case)
    for stale in set(RECORDINGS.iterdir()) - set(written):
        stale.unlink()
    return written


if __name__ == "__main__":
    for path in record_all():
        print(path.relative_to(Path.cwd()) if path.is_relative_to(Path.cwd()) else path)
