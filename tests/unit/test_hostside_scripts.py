"""The host scripts as the controller sends them: source text, stdlib only, python3 >= 3.9."""

from __future__ import annotations

import ast
import glob
import os
import shutil
import subprocess
import sys

import pytest

from rollout.hostside import SCRIPTS, script_text

STDLIB = set(sys.stdlib_module_names)


@pytest.mark.parametrize("name", ["supervisor", "drain", "facts"])
def test_script_text_is_standalone_stdlib_source(name: str) -> None:
    src = script_text(name)
    assert src == script_text(f"{name}.py")
    tree = ast.parse(src)
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            mods = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            assert node.level == 0, "host scripts are single files"
            mods = [node.module or ""]
        else:
            continue
        for mod in mods:
            assert mod.split(".")[0] in STDLIB, f"{name}: non-stdlib import {mod}"
    assert 'if __name__ == "__main__":' in src


def test_unknown_script_is_refused() -> None:
    with pytest.raises(ValueError):
        script_text("../../etc/passwd")
    assert "supervisor" in SCRIPTS


@pytest.mark.parametrize("name", ["supervisor", "drain", "facts"])
def test_runs_on_python39_when_available(name: str) -> None:
    found = glob.glob(os.path.expanduser("~/.pyenv/versions/3.9*/bin/python3.9"))
    py = found[0] if found else shutil.which("python3.9")
    if py is None or subprocess.run([py, "-c", "pass"], capture_output=True).returncode != 0:
        pytest.skip("no python3.9 here")
    p = subprocess.run([py, "-", "--help"], input=script_text(name), capture_output=True,
                       text=True, timeout=10)
    assert p.returncode == 0, p.stderr
    assert "usage" in p.stdout
