"""Programs that run ON each host: single-file, standard-library-only Python 3 scripts.

The controller sends them over SSH (``python3 - ARGS < script``) or uploads them
(the supervisor goes to <root>/rollout/supervisor.py). Each is also importable for tests.
The helpers they share live in common.py; script_text() inlines them, so what a host gets
is still one self-contained file.
"""

from __future__ import annotations

import functools
import threading
from importlib import resources

SCRIPTS = (
    "supervisor", "drain", "facts", "diagnose", "lock", "fetch", "guard", "ops", "agent",
    "files",
)
COMMON_IMPORT = "from rollout.host.scripts.common import "
INLINED_MARK = "# inlined on hosts"
FUTURE = "from __future__ import annotations"
_BUILDING = threading.Lock()


def _source(base: str) -> str:
    return resources.files(__package__).joinpath(f"{base}.py").read_text(encoding="utf-8")


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
def _common_text() -> str:
    """common.py as the scripts inline it (after its docstring, without its __future__
    import), read once for all of them."""
    lines = _split_docstring(_source("common"))[1]
    return "".join(ln for ln in lines if ln.strip() != FUTURE).strip("\n")


def _is_common_import(line: str) -> bool:
    return line.startswith(COMMON_IMPORT) and line.rstrip().endswith(INLINED_MARK)


def script_text(name: str) -> str:
    """Source of the host script ``name`` ("drain" or "drain.py"), ready to send (put
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
    doc, rest = _split_docstring(_source(base))
    imports = sum(1 for ln in rest if _is_common_import(ln))
    if imports > 1:
        raise RuntimeError(f"{base}.py: more than one '{COMMON_IMPORT}...' line")
    script = [ln for ln in rest if not _is_common_import(ln) and ln.strip() != FUTURE]
    if not imports:  # a script that uses none of the helpers goes without them
        return f"{doc}\n{FUTURE}\n\n" + "".join(script).lstrip("\n")
    return (
        f"{doc}\n{FUTURE}\n\n# ---- inlined from rollout/host/scripts/common.py\n\n"
        + _common_text()
        + f"\n\n\n# ---- {base}.py\n\n"
        + "".join(script).lstrip("\n")
    )


def bootstrap(filename: str) -> str:
    """`python3 -c` code that runs a script sent on its stdin after its length (sized()),
    leaving the rest of stdin to the script: how the guard and the agent start."""
    return (
        "import sys; n = int(sys.stdin.buffer.readline()); "
        f'exec(compile(sys.stdin.buffer.read(n), "{filename}", "exec"), {{"__name__": "__main__"}})'
    )


def sized(text: str) -> bytes:
    """Text as a "LENGTH\n" line and then its bytes (what bootstrap() reads)."""
    data = text.encode()
    return f"{len(data)}\n".encode() + data
