"""Programs that run ON each host: single-file, standard-library-only Python 3 scripts.

The controller sends them over SSH (``python3 - ARGS < script``) or uploads them
(the supervisor goes to <root>/rollout/supervisor.py). Each is also importable for tests.
The helpers they share live in common.py (and any module under this package a script
imports with a ``# inlined on hosts`` line, such as actions/hold.py); script_text() inlines
them, so what a host gets is still one self-contained file.
"""

from __future__ import annotations

import functools
import re
import threading
from importlib import resources

SCRIPTS = ("supervisor", "diagnose", "fetch", "guard", "ops", "agent")
INLINED = re.compile(
    r"^from rollout\.host\.scripts\.(\w+(?:\.\w+)*) import .*# inlined on hosts\s*$")
"""A line that imports helpers from a module under this package ("common", "actions.hold"):
script_text() puts that module's text in its place (once, before whatever imports it), so a
host gets one self-contained file."""
FUTURE = "from __future__ import annotations"
_BUILDING = threading.Lock()


def _path(base: str) -> str:
    """A module's file under this package: "actions.hold" is actions/hold.py."""
    return base.replace(".", "/") + ".py"


def _source(base: str) -> str:
    *folders, name = base.split(".")
    return resources.files(__package__).joinpath(*folders, f"{name}.py").read_text(
        encoding="utf-8")


def _split_docstring(src: str) -> tuple[str, list[str]]:
    """(the module docstring, triple-quoted at the very top; the lines after it).

    Plain text, no ast: ast.parse is not thread-safe on CPython 3.11, and the engine calls
    script_text() from a thread per host.
    """
    quote = '"""'
    end = src.find(quote, len(quote)) if src.startswith(quote) else -1
    if end < 0:
        return "", src.splitlines(keepends=True)
    head, _, tail = src[end + len(quote) :].partition("\n")
    if head.strip():
        raise RuntimeError("a host script's docstring must end its line")
    return src[: end + len(quote)] + "\n", tail.splitlines(keepends=True)


@functools.cache
def _body(base: str) -> tuple[str, tuple[str, ...], str]:
    """(a module's docstring; the modules it inlines, in its order; its text without them
    and without its __future__ import), read once for all scripts."""
    doc, rest = _split_docstring(_source(base))
    inlined = tuple(m.group(1) for ln in rest if (m := INLINED.match(ln)))
    body = "".join(ln for ln in rest if not INLINED.match(ln) and ln.strip() != FUTURE)
    return doc, inlined, body.strip("\n")


def _inlined_order(base: str, seen: tuple[str, ...] = ()) -> list[str]:
    """The modules `base` inlines, each once, every one after the modules it needs."""
    if base in seen:
        raise RuntimeError(f"host modules inline each other: {' -> '.join((*seen, base))}")
    order: list[str] = []
    for module in _body(base)[1]:
        for needed in (*_inlined_order(module, (*seen, base)), module):
            if needed not in order:
                order.append(needed)
    return order


def script_text(name: str) -> str:
    """Source of the host script ``name`` ("guard" or "guard.py"), ready to send (put
    together once per process: every host gets the same text; the hosts' threads that
    ask at once wait for the one that builds it).

    Self-contained: the script's docstring, the __future__ import, common.py's helpers,
    then the rest of the script without its ``from rollout.host.scripts.common import``
    line and its own __future__ import.
    """
    with _BUILDING:
        return _script_text(name[:-3] if name.endswith(".py") else name)


@functools.cache
def _script_text(base: str) -> str:
    if base not in SCRIPTS:
        raise ValueError(f"unknown host script {base!r} (known: {', '.join(SCRIPTS)})")
    doc, _, body = _body(base)
    parts = [f"{doc}\n{FUTURE}\n"]
    for module in _inlined_order(base):
        text = _body(module)[2]
        parts.append(f"# ---- inlined from rollout/host/scripts/{_path(module)}\n\n{text}\n")
    if len(parts) > 1:
        parts.append(f"# ---- {base}.py\n")
    return "\n".join(parts) + "\n" + body + "\n"


def bootstrap(filename: str) -> str:
    """`python3 -c` code that runs a script sent on its stdin after its length (sized()),
    leaving the rest of stdin to the script: how the guard, the agent, a download and a
    call without an agent start. The script is compiled once per host: codecache.py's
    run_sized() takes its code from the host's code cache where the cache holds it."""
    if not re.fullmatch(r"\w+\.py", filename):
        raise ValueError(f"not a host script's file name: {filename!r}")
    return _bootstrap(filename)


@functools.cache
def _bootstrap(filename: str) -> str:
    body = _body("codecache")[2]
    if "'" in body:  # the command line quotes it whole: shlex.quote() leaves it as it is
        raise RuntimeError("codecache.py must hold no single quote")
    return f'{FUTURE}\n{body}\nrun_sized("{filename}")\n'


def sized(text: str) -> bytes:
    """Text as a "LENGTH\n" line and then its bytes (what bootstrap() reads)."""
    data = text.encode()
    return f"{len(data)}\n".encode() + data
