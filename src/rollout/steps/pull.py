"""Upload by host pull: the host downloads a published release itself (host/scripts/fetch.py),
into a partial folder kept between attempts so that a cut download resumes. A host that
cannot reach the URL at all gets the executables pushed from the controller instead. A
release staged ahead (stage_pull, during the canary) is installed by a rename instead.

The download runs as a process of its own on the host (`ps` shows what it fetches) on an SSH
channel of its own, and prints its progress as it goes: each line becomes a `progress`
event (bytes, rate, time left) while the step runs. Whatever the host prints is hostile
data: a line that is not a well-formed progress line or the final report is ignored."""

from __future__ import annotations

import json
import shlex

from rollout.errors import StepFailed
from rollout.host.reports import Report
from rollout.host.scripts import bootstrap, script_text, sized
from rollout.jsontypes import JSON, JSONObject
from rollout.output.events import StepResult, changed
from rollout.output.progress import parse_host_progress, tracker_for
from rollout.secrets import tail
from rollout.steps.base import HostContext, Release
from rollout.steps.install import (
    file_sums,
    install_partial,
    install_staged,
    mismatches,
    push_into,
)
from rollout.steps.transfer import follow_lines
from rollout.transport.base import Stream

CONNECT_TIMEOUT = 10.0  # seconds the URL's server has to accept the host's connection
PROGRESS_EVERY = 1.0  # seconds between two progress lines of the host's download
MAX_REPORT = 1 << 16  # characters of the final report line; a longer one is not it


def pull_dir(ctx: HostContext, release: Release) -> str:
    return f"{ctx.layout.releases}/.partial-{release.id}-pull"


def _fetch_args(release: Release, partial: str, urls: dict[str, str],
                seconds: float | None = None) -> list[str]:
    """fetch.py's arguments; `seconds`: the step's time left, the whole download's deadline."""
    args = ["--dir", partial, "--connect-timeout", f"{CONNECT_TIMEOUT:g}"]
    if seconds is not None:
        args += ["--deadline", f"{max(1.0, seconds - 5):g}"]  # ends before the step does
    for a in release.artifacts:
        args += ["--file", a.name, urls[a.name], a.sha256, str(a.size)]
    return args


def fetch_command(args: list[str]) -> tuple[str, bytes]:
    """The command that runs fetch.py with its progress on, and its stdin: the script, then
    nothing more until the controller closes it (fetch.py then exits: --tether)."""
    argv = [*args, "--retries", "3", "--progress", f"{PROGRESS_EVERY:g}", "--tether"]
    command = f"python3 -c {shlex.quote(bootstrap('fetch.py'))} {shlex.join(argv)}"
    return command, sized(script_text("fetch"))


def parse_report(line: str) -> JSONObject | None:
    """fetch.py's final report (hostile data): a JSON object with "files"; else None."""
    if len(line) > MAX_REPORT or not line.startswith("{"):
        return None
    try:
        report = json.loads(line)
    except ValueError:
        return None
    if not isinstance(report, dict) or not isinstance(report.get("files"), dict):
        return None
    return report


def follow(ctx: HostContext, stream: Stream, release: Release, step: str = "upload",
           what: str = "pull") -> JSONObject:
    """Read the download's lines until its report, each progress line an event (at most one
    a second); the step's deadline and the guard are checked between lines."""
    sizes = {a.name: a.size for a in release.artifacts}
    tracker = tracker_for(ctx.emit, step, what, sum(a.size for a in release.artifacts))
    done: dict[str, int] = {}

    def on_line(line: str) -> JSONObject | None:
        sample = parse_host_progress(line, set(sizes))
        if sample is None:
            return parse_report(line)
        done[sample[0]] = min(sample[1], sizes[sample[0]])  # no file counts past its size
        if tracker is not None:
            tracker.update(sum(done.values()))
        return None

    report = follow_lines(ctx, stream, on_line)
    if report is not None:
        return report
    said = bytes(getattr(stream, "stderr", b"") or b"").decode("utf-8", "replace")
    raise StepFailed(f"the download on the host ended without its report: {tail(said, 400)}")


def _fetch(ctx: HostContext, release: Release, directory: str, step: str = "upload",
           what: str = "pull") -> tuple[int, JSON]:
    """Run the download into `directory` on the host, within ctx's deadline; (exit code, its
    report). Where the transport keeps no channel to stream on, as one command whose output
    comes at its end."""
    from rollout.bundle.remote import release_urls  # the bundle's code: where one is pulled

    args = _fetch_args(release, directory, release_urls(release), ctx.remaining())
    command, stdin = fetch_command(args)
    stream = ctx.transport.open_stream(command, stdin)
    if stream is None:
        return ctx.script("fetch", *args, "--retries", 3, own_process=True)
    try:
        report = follow(ctx, stream, release, step, what)
    finally:
        stream.close()
    return (0 if not report.get("error") else 1), report


def _error(code: int, report: JSON) -> JSONObject | None:
    """The download's error (hostile data): None when it succeeded."""
    error = report.get("error") if isinstance(report, dict) else {"message": str(report)}
    if code == 0 and not error:
        return None
    return error if isinstance(error, dict) else {"message": str(error)}


def stage_pull(ctx: HostContext, release: Release, directory: str) -> int:
    """Staging ahead of a published release: the host downloads it into `directory` as the
    upload would (each file's size and sha256 checked as written, within ctx's deadline),
    then each is hashed again there and made executable. StepFailed on any failure, never a
    push from the controller: the host's own upload pulls at its turn. The bytes received."""
    code, report = _fetch(ctx, release, directory, step="staging", what="stage")
    error = _error(code, report)
    if error is not None:
        raise StepFailed(f"host download of release {release.id} from {release.source} "
                         f"failed ({error.get('kind')}): {error.get('message')}")
    names = [a.name for a in release.artifacts]
    bad = mismatches(release, file_sums(ctx, directory, names, mode=0o755))
    if bad:
        raise StepFailed(f"sha256 mismatch on host after download: {', '.join(bad)}")
    return _received(report)


def pull_release(ctx: HostContext, release: Release) -> StepResult:
    assert release.source is not None
    if install_staged(ctx, release):
        return changed(
            f"installed release {release.id}, downloaded by the host from {release.source} "
            "during the canary (sha256 verified as written)",
            release=release.id, bytes_pushed=0, bytes_pulled=0, staged=True,
        )  # fmt: skip
    partial = pull_dir(ctx, release)
    # one round trip: partial pulls of other releases abandoned (the host lock makes this
    # the only one), this one's folder made (kept as it is, to resume)
    made = Report.parse(ctx.call("pull_folder", root=ctx.layout.root,
                                 name=partial.rsplit("/", 1)[-1]))
    if made.outcome not in ("made", "kept"):
        raise StepFailed(f"release {release.id} not pulled: {made.reason}", retryable=False)
    _emit(ctx, "connecting", f"connecting to {release.source} (connect timeout "
          f"{CONNECT_TIMEOUT:g} s)", url=release.source, connect_timeout=CONNECT_TIMEOUT)
    code, report = _fetch(ctx, release, partial)
    error = _error(code, report)
    if error is None:
        install_partial(ctx, release, partial)
        return _pulled(release, report)
    if error.get("kind") == "unreachable":
        size = sum(a.size for a in release.artifacts)
        _emit(ctx, "fallback", f"the host could not reach {release.source}: "
              f"{tail(str(error.get('message')), 300)}; pushing release {release.id} "
              f"({size} bytes) from the controller", url=release.source, bytes=size)
        from rollout.bundle.remote import local_copy, release_urls  # as in _fetch

        local_copy(release, release_urls(release), ctx.remaining())
        pushed = push_into(ctx, release, partial)
        install_partial(ctx, release, partial, checked=True)
        return changed(
            f"pushed release {release.id} from the controller ({pushed} bytes): the host "
            f"could not reach {release.source}: {error.get('message')}",
            release=release.id, bytes_pushed=pushed, bytes_pulled=0, fallback=True,
        )  # fmt: skip
    kind = str(error.get("kind"))
    raise StepFailed(
        f"host download of release {release.id} from {release.source} failed ({kind}): "
        f"{error.get('message')}",
        retryable=kind != "sha256",
    )


def _emit(ctx: HostContext, kind: str, reason: str, **data: JSON) -> None:
    if ctx.emit is not None:
        ctx.emit(kind, step="upload", reason=reason, data=data)


def _received(report: JSON) -> int:
    """The bytes the download says it received (hostile data: a count that is not one is 0)."""
    files = report.get("files") if isinstance(report, dict) else None
    if not isinstance(files, dict):
        return 0
    counts = [f.get("received") for f in files.values() if isinstance(f, dict)]
    return sum(c for c in counts if isinstance(c, int) and c > 0)


def _pulled(release: Release, report: JSONObject) -> StepResult:
    files = report.get("files") or {}
    received = _received(report)
    resumed = {n: f["resumed_from"] for n, f in files.items() if f.get("resumed_from")}
    note = "; resumed " + ", ".join(f"{n} from byte {b}" for n, b in resumed.items())
    return changed(
        f"host pulled release {release.id} from {release.source} ({received} bytes"
        f"{note if resumed else ''}), sha256 verified on host",
        release=release.id, bytes_pushed=0, bytes_pulled=received, resumed=resumed,
    )  # fmt: skip
