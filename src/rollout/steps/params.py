"""Proof parameters in param_cache, checked (and fetched) by preflight before the old daemon
is touched: cuzk reads them only at its first proof, so without this check a host would be
stopped, switched and only then fail its validation with "SRS param file not found".

The host does the work itself (host/scripts/fetch.py --partial): a file already in
param_cache, or in a reuse folder (curio's /var/tmp/filecoin-proof-parameters, the host's
FIL_PROOFS_PARAMETER_CACHE), is checked where it is by its size and digest, and a reused
one is linked from param_cache, never copied; a missing one is downloaded by its CID, as
curio's fetcher would (gateway_of: params.gateway, else the host's IPFS_GATEWAY, else
curio's mirror), resumable. The controller pushes a file only when params.source says so
(opt-in), each source file hashed once per run whatever the number of hosts."""

from __future__ import annotations

import json
from dataclasses import dataclass

from rollout.config.sections import CURIO_GATEWAY, ParamFile, url_problem
from rollout.errors import StepFailed
from rollout.jsontypes import JSON, JSONObject
from rollout.output.progress import parse_host_progress, tracker_for
from rollout.steps.base import HostContext
from rollout.steps.decision import Call, Target
from rollout.steps.params_push import digest_arg, push_missing
from rollout.steps.pull import CONNECT_TIMEOUT, fetch_command, parse_report
from rollout.steps.transfer import follow_lines, put_call
from rollout.units import format_size, parse_size

MAX_LINE = 4096  # characters of a line from the host that may be a size

@dataclass(frozen=True)
class Problem:
    name: str
    found: int | None
    expected: int | None

    def __str__(self) -> str:
        if self.found is None:
            return f"{self.name} (missing)"
        want = f"{self.expected} bytes" if self.expected else "a non-empty file"
        return f"{self.name} ({self.found} bytes, expected {want})"


@dataclass(frozen=True)
class Gateway:
    prefix: str  # a file's URL is this and its CID
    origin: str  # where it was set, in the operator's words


def gateway_of(target: HostContext | Target, probe: JSONObject) -> Gateway:
    """Where a host downloads a file by its CID, as curio's fetcher decides it (paramfetch.go
    doFetch: IPFS_GATEWAY, else its own mirror, the CID appended as it is), params.gateway
    winning over both. The host's IPFS_GATEWAY (the probe's `gateway`) is hostile: one that
    is not a plain http(s) URL ending with / is refused, naming the host and the value
    (escaped), and never used."""
    spec = target.settings.params.gateway
    if spec is not None:
        return Gateway(f"{spec}/ipfs/", "params.gateway")
    value = probe.get("gateway")
    if value is None or value == "":  # unset or empty: curio's own mirror, as curio
        return Gateway(CURIO_GATEWAY, "curio's mirror; IPFS_GATEWAY is unset on the host")
    problem = url_problem(value) or (
        None if str(value).endswith("/") else "curio appends the CID to it as it is, so it "
        "ends with /")
    if problem:
        raise StepFailed(
            f"IPFS_GATEWAY on {target.host.name} is {ascii(value)[:200]}: {problem}; refused, "
            "never used (fix it there, or set params.gateway, which wins over it)",
            retryable=False)
    return Gateway(str(value), "IPFS_GATEWAY on the host")


def downloads(target: HostContext | Target, missing: list[ParamFile]) -> list[ParamFile]:
    """The missing files the host downloads by CID: none where params.source pushes them."""
    return [] if target.settings.params.source is not None else [f for f in missing if f.cid]


def probe_reads(target: HostContext | Target) -> list[tuple[str, JSONObject]]:
    """The read check_params makes first (ops.params_probe): the manifest's files in
    param_cache and the reuse folders, their .partial sizes, the PCE file, the free bytes."""
    spec, cache = target.settings.params, target.settings.daemon.param_cache
    if not spec.files and parse_size(spec.pce_bytes) == 0:
        return []
    return [("params_probe", {"cache": cache, "pce": spec.pce_file,
                              "names": [f.name for f in spec.files],
                              "reuse": list(spec.reuse)})]


def _probe(ctx: HostContext) -> JSONObject:
    (action, kwargs), = probe_reads(ctx)
    return ctx.call(action, call_timeout=30, **kwargs)


def _missing(ctx: HostContext, facts: JSONObject) -> list[ParamFile]:
    return missing_files(ctx.settings.params.files, facts)


def missing_files(files: list[ParamFile], probe: JSONObject) -> list[ParamFile]:
    """The files neither in param_cache nor in a reuse folder (ops.params_probe's report):
    to download or push."""
    sizes, reuse = _object(probe.get("sizes")), _object(probe.get("reuse"))
    return [f for f in files if sizes.get(f.name) is None and not reuse.get(f.name)]


def params_calls(target: Target, probe: JSONObject | None) -> list[Call]:
    """The calls check_params makes on a host whose probe answered `probe` (None: not read
    yet, the probe alone): the probe, the push of each missing file where params.source is
    set (its folder, then a put each), and fetch.py's check and download."""
    reads = probe_reads(target)
    calls = [Call(name, kwargs) for name, kwargs in reads]
    spec, cache = target.settings.params, target.settings.daemon.param_cache
    if probe is None or not reads or not spec.files:
        return calls
    missing = missing_files(spec.files, probe)
    if spec.source is not None and missing:
        calls.append(Call("make_folder", {"path": cache, "link_ok": True}))
        calls += [put_call(f"{cache}/{f.name}.partial") for f in missing]
    gateway = gateway_of(target, probe) if downloads(target, missing) else None
    return [*calls, fetch_call(cache, spec.files, missing, gateway)]


def fetch_call(cache: str, files: list[ParamFile], missing: list[ParamFile],
               gateway: Gateway | None) -> Call:
    """fetch.py's run (a host script, not an ops action), as the dry run and the journal
    name it: the folder, the files it checks, those it must get and, where it downloads,
    the URL the CIDs are appended to."""
    kwargs: JSONObject = {"dir": cache, "names": [f.name for f in files],
                          "missing": [f.name for f in missing]}
    return Call("fetch", kwargs if gateway is None else {**kwargs, "gateway": gateway.prefix})


def check_params(ctx: HostContext) -> str:
    """The proof type's files are in param_cache, verified (reused in place, downloaded by
    the host or pushed when they were not), and param_cache has room for the PCE file.
    Raises StepFailed otherwise, naming each file and what was wrong with it."""
    spec, cache = ctx.settings.params, ctx.settings.daemon.param_cache
    if not spec.files and parse_size(spec.pce_bytes) == 0:
        return "no params manifest"
    facts = _probe(ctx)
    missing = _missing(ctx, facts)
    _check_room(ctx, facts, sum(f.size or 0 for f in missing))
    if not spec.files:
        return f"no params manifest; room in {cache} for the PCE file"
    gateway = gateway_of(ctx, facts) if downloads(ctx, missing) else None
    if missing:
        ctx.forget_reads()  # what preflight read ahead (the PCE's room) changes now
    pushed = push_missing(ctx, missing) if spec.source is not None and missing else {}
    fetched = fetch_call(cache, spec.files, missing, gateway)
    ctx.record(fetched.name, fetched.kwargs)  # a script's run, named as the plan names it
    report = _fetch(ctx, _fetch_args(ctx, pushed, gateway), missing)
    error = report.get("error")
    if error:
        raise _failure(ctx, missing, error, gateway)
    return _summary(ctx, _object(report.get("files")), _object(facts.get("partial")), pushed,
                    gateway)


def _object(value: JSON) -> JSONObject:
    """A part of a host's answer that should be a JSON object: {} when it is anything else."""
    return value if isinstance(value, dict) else {}


def _fetch_args(ctx: HostContext, pushed: dict[str, str], gateway: Gateway | None
                ) -> list[str]:
    """fetch.py's arguments: a file has a URL only where it is downloaded (`gateway`); a
    pushed one is checked by the digest pushed."""
    spec = ctx.settings.params
    args = ["--dir", ctx.settings.daemon.param_cache, "--partial",
            "--connect-timeout", f"{CONNECT_TIMEOUT:g}"]
    seconds = ctx.remaining()
    if seconds is not None:
        args += ["--deadline", f"{max(1.0, seconds - 5):g}"]  # ends before the step does
    for folder in spec.reuse:
        args += ["--reuse", folder]
    for f in spec.files:
        url = "-" if gateway is None or f.name in pushed or not f.cid else gateway.prefix + f.cid
        digest = pushed.get(f.name) or digest_arg(f)
        args += ["--file", f.name, url, digest, str(f.size) if f.size else "-"]
    return args


def _fetch(ctx: HostContext, args: list[str], missing: list[ParamFile]) -> JSONObject:
    """Run fetch.py on the host, its progress lines as `progress` events; its report."""
    command, stdin = fetch_command(args)
    stream = ctx.transport.open_stream(command, stdin) if missing else None
    if stream is None:  # nothing to download: a check of what is there, in the host's agent
        _code, report = ctx.script("fetch", *args, "--retries", 3, own_process=bool(missing))
        return report if isinstance(report, dict) else {"error": {"message": str(report)}}
    sizes = {f.name: f.size or 0 for f in missing}
    tracker = tracker_for(ctx.emit, "preflight", "params", sum(sizes.values()))
    done: dict[str, int] = {}

    def on_line(line: str) -> JSONObject | None:
        learnt = _total(line, {n for n, size in sizes.items() if not size})
        if learnt is not None:  # a size the manifest lacks, from the gateway
            sizes[learnt[0]] = learnt[1]
            if tracker is not None:
                tracker.total = sum(sizes.values())
            return None
        sample = parse_host_progress(line, set(sizes))
        if sample is None:
            return parse_report(line)
        done[sample[0]] = min(sample[1], sizes[sample[0]])  # no file counts past its size
        if tracker is not None and tracker.total:
            tracker.update(sum(done.values()))
        return None

    try:
        report = follow_lines(ctx, stream, on_line)
    finally:
        stream.close()
    return report or {"error": {"kind": "ended", "message": "ended without its report"}}


def _total(line: str, names: set[str]) -> tuple[str, int] | None:
    """fetch.py's `{"total": {"file": NAME, "bytes": N}}` (hostile data) for one of `names`
    (the files of no known size), N a positive int below 2**60; else None."""
    if len(line) > MAX_LINE or not line.startswith('{"total"'):
        return None
    try:
        body = json.loads(line).get("total")
    except (ValueError, AttributeError):
        return None
    if not isinstance(body, dict) or body.get("file") not in names:
        return None
    size = body.get("bytes")
    if not isinstance(size, int) or isinstance(size, bool) or not 0 < size < 1 << 60:
        return None
    return str(body["file"]), size


def _failure(ctx: HostContext, missing: list[ParamFile], error: JSON,
             gateway: Gateway | None) -> StepFailed:
    cache = ctx.settings.daemon.param_cache
    error = error if isinstance(error, dict) else {}
    kind, message = str(error.get("kind")), str(error.get("message"))[:600]
    if kind in ("size", "digest", "sha256"):
        return StepFailed(f"proof parameter refused by {'size' if kind == 'size' else kind}: "
                          f"{message}", retryable=False)
    listed = ", ".join(str(Problem(f.name, None, f.size)) for f in missing)
    hint = (f" from {gateway.prefix} ({gateway.origin}; or copy them there, or set "
            "params.source to push them)" if gateway else "" if ctx.settings.params.source
            else " (copy them there, or set params.source to push them)")
    return StepFailed(f"proof parameters not in {cache}: {listed or error.get('file')}; "
                      f"fetching them{hint} failed ({kind}): {message}",
                      retryable=kind not in ("missing",))


def _summary(ctx: HostContext, files: JSONObject, partial: JSONObject,
             pushed: dict[str, str], gateway: Gateway | None = None) -> str:
    cache = ctx.settings.daemon.param_cache
    notes = [_note(name, f if isinstance(f, dict) else {}, partial.get(name), pushed)
             for name, f in files.items()]
    source = "" if gateway is None else f"; downloads from {gateway.prefix} ({gateway.origin})"
    return f"params in {cache}: {'; '.join(notes) or 'none'}{source}"


def _note(name: str, f: JSONObject, partial: JSON, pushed: dict[str, str]) -> str:
    outcome, path = str(f.get("outcome")), str(f.get("path"))
    if outcome == "present":
        return f"{name} present, verified"
    if outcome == "reused":
        return f"{name} reused in place from {path}, verified"
    resumed = f", resumed at {partial} bytes" if isinstance(partial, int) and partial else ""
    if outcome == "pushed":
        algo = str(pushed.get(name)).partition(":")[0]
        return f"{name} staged from the controller{resumed}, {algo} verified"
    return f"{name} downloaded ({f.get('received')} bytes{resumed}), verified"


def _check_room(ctx: HostContext, facts: JSONObject, staged: int) -> None:
    spec, cache = ctx.settings.params, ctx.settings.daemon.param_cache
    pce = 0 if facts.get("pce") else parse_size(spec.pce_bytes)
    free = facts.get("free")
    if isinstance(free, int) and free < staged + pce:
        what = [f"{format_size(staged)} of params to fetch"] if staged else []
        what += [f"{format_size(pce)} for the PCE file ({spec.pce_file})"] if pce else []
        raise StepFailed(
            f"param_cache {cache} has {format_size(free)} free, needs {' + '.join(what)}",
            retryable=False,
        )
