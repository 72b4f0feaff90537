"""Crash forensics for one host, bounded: prints one JSON object, changes nothing.

Run on the host by the controller:  python3 - --root /data < diagnose.py

Never reads a whole log: the daemon log is read from its end (a fixed window), grepped
with a cap on matches and on line length, and the whole output is capped well under 1 MB.
Collects the daemon log tail, error-pattern matches, cgroup OOM counters, kernel messages
(when /dev/kmsg is readable), the supervisor's exit and start records and its state file.
Standard library only; runs on python3 >= 3.9.
"""

from __future__ import annotations

import argparse
import contextlib
import errno
import json
import os
import re
import sys
import time
from typing import Any

# script_text() replaces the next line with common.py: it stays one line
# ruff: noqa: E501
# isort: off
from rollout.host.scripts.common import Collector, parse_jsonl, proc_start_epoch, proc_starttime, read_int, read_kv, tail_window  # inlined on hosts
# isort: on

PATTERNS = (
    r"panic", r"FATAL", r"SIGSEGV", r"abort", r"CUDA_ERROR", r"cudaError", r"Xid",
    r"killed", r"out of memory", r"failed",
)
ERROR_RE = re.compile("|".join(PATTERNS).encode(), re.IGNORECASE)
KERNEL_RE = re.compile(
    rb"out of memory|oom[-_ ]kill|Killed process|Memory cgroup|NVRM|Xid|segfault|"
    rb"general protection|cuzk", re.IGNORECASE)
START_MARKER = b"=== rollout supervisor: starting release"
OUTPUT_CAP = 256 * 1024


def clip(line: bytes | str, cap: int) -> str:
    text = line.decode(errors="replace") if isinstance(line, bytes) else line
    text = text.rstrip("\r\n")
    return text if len(text) <= cap else text[:cap] + f"... [{len(text) - cap} more chars]"


def read_small(path: str, cap: int = 64 * 1024) -> str | None:
    try:
        with open(path, "rb") as f:
            return f.read(cap).decode(errors="replace")
    except OSError:
        return None


class LogScan:
    """The end of the daemon log (and of its rotated predecessor if the log is short)."""

    def __init__(self, path: str, window: int, tail_lines: int, max_matches: int,
                 line_cap: int) -> None:
        self.path, self.window = path, window
        self.tail_lines, self.max_matches, self.line_cap = tail_lines, max_matches, line_cap

    def chunks(self) -> tuple[list[bytes], list[dict[str, Any]]]:
        data: list[bytes] = []
        files: list[dict[str, Any]] = []
        budget = self.window
        for path in (self.path, self.path + ".1"):
            if budget <= 0 or not os.path.exists(path):
                continue
            chunk, start, size = tail_window(path, budget)
            files.append({"path": path, "size": size, "scanned_from": start,
                          "scanned_bytes": len(chunk), "whole": start == 0})
            data.insert(0, chunk)
            budget -= len(chunk)
            if start > 0:
                break
        return data, files

    def collect(self) -> dict[str, Any]:
        data, files = self.chunks()
        lines = b"\n".join(c.rstrip(b"\n") for c in data if c).split(b"\n")
        runs_after = [0] * len(lines)  # how many supervisor starts come after each line
        starts = 0
        for i in range(len(lines) - 1, -1, -1):
            runs_after[i] = starts
            if lines[i].startswith(START_MARKER):
                starts += 1
        matches: list[dict[str, Any]] = []
        for i in range(len(lines) - 1, -1, -1):
            if len(matches) >= self.max_matches:
                break
            if ERROR_RE.search(lines[i][:4096]):
                matches.append({"line": clip(lines[i], self.line_cap), "run": runs_after[i],
                                "next": clip(lines[i + 1], self.line_cap)
                                if i + 1 < len(lines) else None})
        matches.reverse()
        markers = [clip(ln, self.line_cap) for ln in lines if ln.startswith(START_MARKER)]
        first = max(0, len(lines) - self.tail_lines)
        tail = [{"line": clip(lines[i], self.line_cap), "run": runs_after[i]}
                for i in range(first, len(lines)) if lines[i].strip()]
        return {"files": files, "exists": bool(files), "lines_scanned": len(lines),
                "matches": matches, "matches_capped": len(matches) >= self.max_matches,
                "start_markers": markers[-10:], "tail": tail}


def cgroup(root: str) -> dict[str, Any]:
    v1 = os.path.join(root, "memory")
    if os.path.exists(os.path.join(v1, "memory.usage_in_bytes")):
        return {"version": 1,
                "failcnt": read_int(os.path.join(v1, "memory.failcnt")),
                "oom_control": read_kv(os.path.join(v1, "memory.oom_control")),
                "usage": read_int(os.path.join(v1, "memory.usage_in_bytes")),
                "max_usage": read_int(os.path.join(v1, "memory.max_usage_in_bytes")),
                "limit": read_int(os.path.join(v1, "memory.limit_in_bytes"))}
    if os.path.exists(os.path.join(root, "memory.current")):
        return {"version": 2,
                "events": read_kv(os.path.join(root, "memory.events")),
                "usage": read_int(os.path.join(root, "memory.current")),
                "peak": read_int(os.path.join(root, "memory.peak")),
                "limit": read_int(os.path.join(root, "memory.max"))}
    return {"version": None}


def kernel_record(rec: bytes, boot: float, line_cap: int) -> dict[str, Any]:
    """A /dev/kmsg record "prio,seq,usec,flags;message" as its wall time and message."""
    head, _, msg = rec.partition(b";")
    fields = head.split(b",")
    when = None
    with contextlib.suppress(ValueError, IndexError):
        when = round(boot + int(fields[2]) / 1e6, 3)
    return {"time": when, "line": clip(msg.split(b"\n")[0], line_cap)}


def kernel_messages(path: str, max_records: int, keep: int, line_cap: int) -> dict[str, Any]:
    """Matching records of the kernel ring buffer; unreadable in most containers."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    except OSError as e:
        return {"readable": False, "error": f"{path}: {e.strerror}", "lines": []}
    found: list[dict[str, Any]] = []
    seen = 0
    boot = time.time() - float((read_small("/proc/uptime", 64) or "0").split()[0])
    try:
        while seen < max_records:
            try:
                rec = os.read(fd, 8192)
            except OSError as e:
                if e.errno == errno.EPIPE:  # overwritten while reading: go on
                    continue
                if e.errno == errno.EAGAIN:
                    break
                return {"readable": False, "error": f"{path}: {e.strerror}", "lines": []}
            if not rec:
                break
            seen += 1
            if KERNEL_RE.search(rec):
                found.append(kernel_record(rec, boot, line_cap))
    finally:
        os.close(fd)
    return {"readable": True, "records_read": seen, "lines": found[-keep:]}


def jsonl_tail(path: str, max_bytes: int, keep: int) -> list[Any] | None:
    if not os.path.exists(path):
        return None
    return parse_jsonl(tail_window(path, max_bytes)[0].splitlines())[-keep:]


def text_tail(path: str, max_bytes: int, keep: int, cap: int) -> list[str] | None:
    if not os.path.exists(path):
        return None
    return [clip(ln, cap) for ln in tail_window(path, max_bytes)[0].splitlines()[-keep:]]


class Diagnose(Collector):
    def __init__(self, args: argparse.Namespace) -> None:
        super().__init__()
        self.args = args
        self.dir = os.path.join(args.root, "rollout")

    def collect(self) -> dict[str, Any]:
        a = self.args
        log = a.log or os.path.join(self.dir, "daemon.log")
        scan = LogScan(log, a.window_bytes, a.tail_lines, a.max_matches, a.line_cap)
        state = os.path.join(self.dir, "supervisor.json")
        out: dict[str, Any] = {"time": time.time(), "root": a.root, "log_path": log}
        out["log"] = self.safe("log", scan.collect)
        out["cgroup"] = self.safe("cgroup", lambda: cgroup(a.cgroup_root))
        out["kernel"] = self.safe("kernel", lambda: kernel_messages(
            a.kmsg, a.kmsg_records, a.max_matches, a.line_cap))
        out["exits"] = self.safe("exits", lambda: jsonl_tail(
            os.path.join(self.dir, "exits.jsonl"), 64 * 1024, a.records))
        out["starts"] = self.safe("starts", lambda: jsonl_tail(
            os.path.join(self.dir, "starts.jsonl"), 32 * 1024, a.records))
        out["supervisor_state"] = self.safe("supervisor_state", lambda: json.loads(
            read_small(state) or "null"))
        out["supervisor_log"] = self.safe("supervisor_log", lambda: text_tail(
            os.path.join(self.dir, "supervisor.log"), 16 * 1024, 20, a.line_cap))
        out["release"] = self.safe("release", lambda: json.loads(
            read_small(os.path.join(a.root, "current", "RELEASE.json")) or "null"))
        if a.old_log:
            old = LogScan(a.old_log, a.window_bytes, a.tail_lines, a.max_matches, a.line_cap)
            out["old_log"] = self.safe("old_log", old.collect)
        out["container"] = self.safe("container", lambda: {
            "started_at": proc_start_epoch(a.proc, proc_starttime(a.proc, 1))})
        out["errors"] = self.errors
        return out


def shrink(out: dict[str, Any], cap: int) -> str:
    """The JSON text, with the biggest lists halved until it fits the cap."""
    text = json.dumps(out, sort_keys=True, default=str)
    log = out.get("log") or {}
    while len(text) > cap and (log.get("tail") or log.get("matches")):
        for key in ("tail", "matches"):
            log[key] = log.get(key, [])[len(log.get(key, [])) // 2:]
        log["shrunk"] = True
        text = json.dumps(out, sort_keys=True, default=str)
    return text


def parse_args(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(description="bounded crash forensics as one JSON object")
    p.add_argument("--root", default="/data")
    p.add_argument("--log", help="daemon log (default <root>/rollout/daemon.log)")
    p.add_argument("--old-log", help="also scan the log a hand-started daemon wrote")
    p.add_argument("--window-bytes", type=int, default=4 << 20,
                   help="how far back from the end of the log to grep")
    p.add_argument("--tail-lines", type=int, default=40)
    p.add_argument("--max-matches", type=int, default=40)
    p.add_argument("--line-cap", type=int, default=300)
    p.add_argument("--records", type=int, default=20, help="exit/start records kept")
    p.add_argument("--kmsg", default="/dev/kmsg")
    p.add_argument("--kmsg-records", type=int, default=20000)
    p.add_argument("--cgroup-root", default="/sys/fs/cgroup")
    p.add_argument("--proc", default="/proc")
    p.add_argument("--output-cap", type=int, default=OUTPUT_CAP)
    return p.parse_args(argv)


def main(argv: list[str]) -> int:
    args = parse_args(argv)
    try:
        out = Diagnose(args).collect()
    except Exception as e:  # last resort: still one JSON object
        out = {"time": time.time(), "errors": {"diagnose": f"{type(e).__name__}: {e}"}}
    print(shrink(out, args.output_cap))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
