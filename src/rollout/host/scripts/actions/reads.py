"""What validate and preflight read: the input, the CPU, the GPUs, libraries, params,
PCE files and a C1."""

from __future__ import annotations

import contextlib
import json
import os
import stat
from typing import Any

# ruff: noqa: E501
# isort: off
from rollout.host.scripts.common import read_text, safe_remove  # inlined on hosts
from rollout.host.scripts.actions.base import _open_read, _report, _status_answer  # inlined on hosts
from rollout.host.scripts.actions.spec import action  # inlined on hosts
from rollout.host.scripts.actions.daemon import owners  # inlined on hosts
from rollout.host.scripts.actions.folders import _names, _sha256_of  # inlined on hosts
# isort: on

@action("path:str size:int?", "size:int? sha256:str?", "missing wrong-size present")
def input_check(path: str, size: int | None = None) -> dict[str, Any]:
    """The validation input's size and, where that is right (or no size is set), its
    sha256: present, missing (or not a regular file: a link is not read), wrong-size."""
    fd = _open_read(path)
    if fd is None:
        return _report("missing", f"{path} missing", size=None, sha256=None)
    with os.fdopen(fd, "rb") as f:
        have = os.fstat(f.fileno()).st_size
    if size is not None and have != size:
        return _report("wrong-size", f"{path} is {have} bytes, not {size}", size=have,
                       sha256=None)
    return _report("present", f"{path} present", size=have, sha256=_sha256_of(path))


@action(
    "input_path:str input_size:int? status_url:str ports:[int]? pid:int?",
    "input:obj status:str? owners:obj?",
    "probed", warms="http.client"
)
def probe(input_path: str, input_size: int | None = None, status_url: str = "",
          ports: list[int] | None = None, pid: int | None = None) -> dict[str, Any]:
    """What validate reads before the proof, in one call: the input (input_check), the
    status port's answer (None when off or silent) and who holds the daemon's ports."""
    found = input_check(input_path, input_size)
    answer = _status_answer(status_url, 5.0) if status_url else None
    held = owners(ports, pid) if ports else None
    return _report("probed", found["reason"], input=found, status=answer, owners=held)


@action("partial:str path:str sha256:str", "", "missing mismatch refused staged")
def stage_input(partial: str, path: str, sha256: str) -> dict[str, Any]:
    """Put an uploaded input (`partial`) in place at `path` where its sha256 is `sha256`
    (a rename: a link at `path` is replaced, never written through); else remove it."""
    have = _sha256_of(partial)
    if have is None:
        return _report("missing", f"{partial} missing")
    if have != sha256:
        safe_remove(partial)
        return _report("mismatch", f"sha256 {have[:12]} is not {sha256[:64]}")
    folder = os.path.dirname(path) or "."
    if os.path.islink(folder) or os.path.dirname(partial) != os.path.dirname(path):
        safe_remove(partial)
        return _report("refused", f"{folder} is a link, or {partial} is not beside {path}")
    os.replace(partial, path)
    return _report("staged", f"staged {path}")



# ---------------------------------------------------------------- what preflight reads


@action("path:str", "text:str", "read none")
def cpu_info(path: str = "/proc/cpuinfo") -> dict[str, Any]:
    """The first CPU's flags line of /proc/cpuinfo ("flags" on x86, "Features" on arm)."""
    for line in (read_text(path) or "").splitlines():
        if line.startswith(("flags", "Features")):
            return _report("read", "the first CPU's flags", text=line[:8192])
    return _report("none", f"no flags line in {path}", text="")


GPU_FIELDS = ("index", "uuid", "name", "driver_version", "compute_cap", "memory.total",
              "memory.free")
"""What preflight asks nvidia-smi of each GPU (`--query-gpu`, in this order, CSV without
units: memory in MiB); the controller reads the columns by these names."""
APP_FIELDS = ("gpu_uuid", "pid", "used_memory")
"""What it asks of each process on a GPU (`--query-compute-apps`): the memory it holds."""


def _nvidia_smi(query: str, fields: tuple[str, ...], timeout: float) -> tuple[int, str, str]:
    """nvidia-smi's exit code, its output and its errors, kept apart (the last 8 KiB of
    each): 127 where there is no nvidia-smi, 124 where it did not end within `timeout`."""
    import subprocess

    argv = ["nvidia-smi", f"--{query}={','.join(fields)}", "--format=csv,noheader,nounits"]
    try:
        r = subprocess.run(argv, stdin=subprocess.DEVNULL, capture_output=True,
                           timeout=timeout, check=False)
    except FileNotFoundError:
        return 127, "", "nvidia-smi: not found"
    except subprocess.TimeoutExpired:
        return 124, "", f"nvidia-smi did not end within {timeout:g}s"
    return (r.returncode, r.stdout.decode("utf-8", "replace")[-8192:],
            r.stderr.decode("utf-8", "replace")[-8192:])


@action("timeout:float", "exit:int output:str apps_exit:int? apps:str warnings:str",
        "failed timeout ran")
def gpus(timeout: float = 60.0) -> dict[str, Any]:
    """nvidia-smi's answer for each GPU (GPU_FIELDS) as data, its exit code (127: no
    nvidia-smi, 124: it hung); where that ran, the memory each process holds on each GPU
    (APP_FIELDS, `apps`, and its exit code). Its errors: with its output where it failed,
    else apart (`warnings`: what it said on stderr though it answered)."""
    code, output, errors = _nvidia_smi("query-gpu", GPU_FIELDS, timeout)
    if code != 0:
        word = "timeout" if code == 124 else "failed"
        return _report(word, f"nvidia-smi exited {code}", exit=code,
                       output=(output + errors)[-8192:], apps_exit=None, apps="", warnings="")
    apps_exit, apps, apps_errors = _nvidia_smi("query-compute-apps", APP_FIELDS, timeout)
    return _report("ran", "nvidia-smi exited 0", exit=0, output=output, apps_exit=apps_exit,
                   apps=apps if apps_exit == 0 else (apps + apps_errors)[-8192:],
                   warnings=errors[-2000:])


@action("directory:str names:[str]", "outputs:{str}", "missing no-ldd read")
def ldd(directory: str, names: list[str]) -> dict[str, Any]:
    """Each executable's `LC_ALL=C ldd` output (its errors too): "missing" where the release
    folder is not there (or is a link), "no-ldd" where the host has no ldd."""
    import shutil
    import subprocess

    if os.path.islink(directory) or not os.path.isdir(directory):
        return _report("missing", f"{directory} is not on the host", outputs={})
    if not shutil.which("ldd"):
        return _report("no-ldd", "no ldd on the host", outputs={})
    env = {**os.environ, "LC_ALL": "C"}
    outputs = {}
    for name in _names(names):
        try:
            r = subprocess.run(["ldd", "--", os.path.join(directory, name)], env=env,
                               stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                               stderr=subprocess.STDOUT, timeout=60, check=False)
        except subprocess.TimeoutExpired:
            outputs[name] = "ldd did not end within 60s"
            continue
        outputs[name] = r.stdout.decode("utf-8", "replace")[-8192:]
    return _report("read", f"ldd of {len(outputs)} executable(s)", outputs=outputs)


@action("path:str", "", "present missing")
def file_present(path: str) -> dict[str, Any]:
    """Whether `path` is a regular file (as `test -f` says: a link to one counts)."""
    word = "present" if os.path.isfile(path) else "missing"
    return _report(word, f"{path} {word}")


def _nearest_free(folder: str) -> int:
    """Free bytes where `folder` is, or would be: its nearest existing folder."""
    where = folder
    while not os.path.isdir(where) and where not in ("", "/"):
        where = os.path.dirname(where)
    st = os.statvfs(where or "/")
    return st.f_bavail * st.f_frsize


def _size(path: str) -> int | None:
    try:
        return os.stat(path).st_size
    except OSError:
        return None


@action(
    "cache:str pce:str names:[str] reuse:[str]",
    "sizes:{int?} partial:{int?} reuse:{str?} pce:bool free:int gateway:str?",
    "probed",
)
def params_probe(cache: str, pce: str, names: list[str], reuse: list[str]) -> dict[str, Any]:
    """The params manifest's files: their sizes in param_cache (through links), their
    .partial sizes, the reuse folder holding each (and $FIL_PROOFS_PARAMETER_CACHE), whether
    the PCE file is there, the free bytes where param_cache is, and $IPFS_GATEWAY (None:
    unset), which the controller checks before it downloads from it."""
    env = os.environ.get("FIL_PROOFS_PARAMETER_CACHE", "")
    folders = [str(d) for d in reuse if isinstance(d, str)] + ([env] if env.startswith("/")
                                                               else [])
    wanted = _names(names)

    def elsewhere(name: str) -> str | None:
        return next((d for d in folders if os.path.isfile(os.path.join(d, name))), None)

    return _report(
        "probed", f"{len(wanted)} param file(s) looked for in {cache}",
        sizes={n: _size(os.path.join(cache, n)) for n in wanted},
        partial={n: _size(os.path.join(cache, n + ".partial")) for n in wanted},
        reuse={n: elsewhere(n) for n in wanted},
        pce=_size(os.path.join(cache, os.path.basename(pce))) is not None,
        free=_nearest_free(cache), gateway=os.environ.get("IPFS_GATEWAY"))


@action("cache:str names:[str]", "files:{obj?} free:int", "probed")
def pce_sizes(cache: str, names: list[str]) -> dict[str, Any]:
    """The PCE file and its temporary in param_cache (regular files only: lstat, never
    through a link: a link's size says nothing of what cuzk writes), and the free bytes
    where param_cache is."""

    def file(name: str) -> dict[str, int] | None:
        try:
            st = os.lstat(os.path.join(cache, name))
        except OSError:
            return None
        if not stat.S_ISREG(st.st_mode):
            return None
        return {"size": st.st_size, "blocks": st.st_blocks * 512}

    wanted = _names(names)
    return _report("probed", f"{len(wanted)} PCE file(s) looked for in {cache}",
                   files={n: file(n) for n in wanted}, free=_nearest_free(cache))


@action("path:str limit:int", "missing:str odd:str c1:obj", "missing odd read")
def c1_probe(path: str, limit: int) -> dict[str, Any]:
    """The C1 at `path` (a regular file, never through a link, at most `limit` bytes): its
    SectorNum, and of its Phase1Out only what the replica id check reads, as a small C1 of
    the same shape ("read", c1); "missing" or "odd" (not a regular file, too large)."""
    import base64

    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError as e:
        return _report("missing", f"{path}: {e.strerror}", missing=e.strerror)
    with os.fdopen(fd, "rb") as f:
        st = os.fstat(f.fileno())
        if not stat.S_ISREG(st.st_mode) or st.st_size > limit:
            odd = "not a regular file" if not stat.S_ISREG(st.st_mode) else f"{st.st_size} bytes"
            return _report("odd", f"{path}: {odd}", odd=odd)
        data = f.read(limit + 1)
    try:
        doc: Any = json.loads(data)
    except (ValueError, RecursionError):
        return _report("odd", f"{path}: not JSON", odd="not JSON")
    with contextlib.suppress(Exception):  # hostile bytes: Phase1Out kept as it is
        inner = json.loads(base64.b64decode(doc["Phase1Out"]))
        keep = {k: inner.get(k) for k in ("registered_proof", "ticket", "comm_d", "replica_id")}
        doc["Phase1Out"] = base64.b64encode(json.dumps(keep).encode()).decode()
    small = {k: doc.get(k) for k in ("SectorNum", "Phase1Out")} if isinstance(doc, dict) else {}
    return _report("read", f"{path} read", c1=small)
