"""The host scripts as the controller sends them: source text, stdlib only, python3 >= 3.9."""

from __future__ import annotations

import ast
import glob
import os
import shutil
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from functools import cache
from pathlib import Path

import pytest

from rollout.host.scripts import SCRIPTS, common, script_text

STDLIB = set(sys.stdlib_module_names)
COMMON_SRC = Path(common.__file__).read_text()


def top_level_names(src: str) -> set[str]:
    """Names a module binds at its top level (defs, classes, assignments; not imports)."""
    names: set[str] = set()
    for node in ast.parse(src).body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names.update(t.id for t in targets if isinstance(t, ast.Name))
    return names


@cache
def parsed(name: str) -> ast.Module:
    """The script as sent, parsed once per test process (two tests read it; 0.4 s of CPU
    for all of them each time)."""
    return ast.parse(script_text(name))


@pytest.mark.parametrize("name", SCRIPTS)
def test_script_text_is_standalone_stdlib_source(name: str) -> None:
    src = script_text(name)
    assert src == script_text(f"{name}.py")
    tree = parsed(name)
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


@cache
def python39() -> str | None:
    """A python3.9 that starts, looked for once per test process (a start each is ~0.1 s)."""
    found = glob.glob(os.path.expanduser("~/.pyenv/versions/3.9*/bin/python3.9"))
    py = found[0] if found else shutil.which("python3.9")
    if py is None or subprocess.run([py, "-c", "pass"], capture_output=True).returncode != 0:
        return None
    return py


@pytest.mark.parametrize("name", SCRIPTS)
def test_runs_on_python39_when_available(name: str) -> None:
    py = python39()
    if py is None:
        pytest.skip("no python3.9 here")
    # -I -S: the standard library alone (a pyenv python's site imports ~0.1 s of packages)
    p = subprocess.run([py, "-I", "-S", "-", "--help"], input=script_text(name),
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    assert "usage" in p.stdout


@cache
def isolated() -> list[str]:
    """This python as the scripts' test runs it (-I -S), once checked (per test process)
    to leave the rollout package out of reach from a folder outside the checkout."""
    py = [sys.executable, "-I", "-S"]
    with tempfile.TemporaryDirectory() as elsewhere:
        probe = subprocess.run([*py, "-c", "import rollout"], capture_output=True,
                               cwd=elsewhere)
    assert probe.returncode != 0, "rollout must not be importable here"
    return py


@pytest.mark.parametrize("name", SCRIPTS)
def test_script_text_inlines_common_and_runs_without_rollout(name: str, tmp_path: Path) -> None:
    src = script_text(name)
    compile(src, f"{name}.py", "exec")
    tree = parsed(name)
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            assert not (node.module or "").startswith("rollout"), f"{name}: {node.module}"
        elif isinstance(node, ast.Import):
            assert not any(a.name.startswith("rollout") for a in node.names), name
    assert "rollout.host.scripts" not in "".join(ln for ln in src.splitlines() if "import" in ln)
    # the script's own docstring comes first (stop.py's --help shows it), then the future import
    assert ast.get_docstring(tree) == ast.get_docstring(ast.parse(
        Path(common.__file__).with_name(f"{name}.py").read_text()))
    first = [n for n in tree.body if isinstance(n, ast.ImportFrom)][0]
    assert first.module == "__future__"
    assert src.count("from __future__ import annotations") == 1
    # -I -S: no site-packages, so no rollout package (isolated()); cwd elsewhere
    py = isolated()
    p = subprocess.run([*py, "-", "--help"], input=src, capture_output=True, text=True,
                       cwd=tmp_path, timeout=120)
    assert p.returncode == 0, p.stderr
    assert p.stdout.startswith("usage:")


@pytest.mark.parametrize("name", SCRIPTS)
def test_scripts_do_not_redefine_common_names(name: str) -> None:
    """Inlined, a script's definition would replace common's for the helpers that call it."""
    own = top_level_names(Path(common.__file__).with_name(f"{name}.py").read_text())
    assert not own & top_level_names(COMMON_SRC)


def test_common_is_stdlib_only() -> None:
    for node in ast.walk(ast.parse(COMMON_SRC)):
        if isinstance(node, ast.Import):
            assert all(a.name.split(".")[0] in STDLIB for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            assert node.level == 0 and (node.module or "").split(".")[0] in STDLIB


def test_script_text_from_many_threads() -> None:
    """The engine asks for scripts from a thread per host (ast.parse there crashed on 3.11)."""
    with ThreadPoolExecutor(16) as pool:
        texts = list(pool.map(lambda i: script_text(SCRIPTS[i % len(SCRIPTS)]), range(400)))
    assert len(set(texts)) == len(SCRIPTS)
