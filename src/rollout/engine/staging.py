"""Staging ahead: while the canary batch runs, each host of the later batches receives the
release's executables into a hidden folder (<root>/rollout/staging/<release>, outside
releases/: nothing sees a release there), each checked on the host as it is written:
pushed from the controller, or, for a published release (`--release URL`), downloaded by
the host itself as its upload would (host/scripts/fetch.py, within the upload step's
timeout). The upload step of such a host then installs them by a rename instead of sending
or downloading them again.

Staging is not a step: it emits `staged` events, never step_start. It never fails a host: a
staging that fails is removed at once and the host's upload works as without it; a run
that ends before a host's batch stops what is under way and removes what it staged there,
so the host is left as found."""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field

from rollout.engine.stepper import DEFAULT_STEP_TIMEOUT
from rollout.errors import RolloutError, StepFailed
from rollout.host.layout import Layout
from rollout.host.reports import FilesReport, SurveyReport
from rollout.output.events import EventBus
from rollout.steps.base import HostContext
from rollout.steps.decision import Release, Staged
from rollout.steps.install import identities_of, push_into
from rollout.steps.pull import stage_pull

STAGING_WORKERS = 4  # hosts staged at once: the controller's CPU is shared with the canary
OpenHost = Callable[[str], contextlib.AbstractContextManager[HostContext]]


def staging_root(layout: Layout) -> str:
    return f"{layout.state_dir}/staging"


def staging_dir(layout: Layout, release_id: str) -> str:
    return f"{staging_root(layout)}/{release_id}"


@dataclass(frozen=True)
class Survey:
    stale: list[str]
    present: bool
    same_device: bool
    links: list[str] = field(default_factory=list)  # folders that are links: nothing staged


def survey(ctx: HostContext, release: Release) -> Survey:
    """One round trip (ops.staging_survey): stale staging of other releases removed, whether
    the release is installed already, and whether a rename stays on one device; nothing
    removed where the state folder or the staging folder is a link."""
    found = SurveyReport.parse(ctx.call("staging_survey", root=ctx.layout.root,
                                        release=release.id,
                                        names=[a.name for a in release.artifacts]))
    if found.outcome != "surveyed":
        raise StepFailed(f"staging survey: {found.reason or found.outcome}")
    return Survey(list(found.stale), found.present, found.same_device, list(found.links))


def stage(ctx: HostContext, release: Release, seconds: float = DEFAULT_STEP_TIMEOUT) -> Staged:
    """Put the executables into the staging folder, each checked as it lands (pushed, or
    downloaded by the host within `seconds` for a published release), evict them from the
    page cache and read their identities."""
    directory = staging_dir(ctx.layout, release.id)
    names = [a.name for a in release.artifacts]
    if release.source:
        ctx.deadline = time.monotonic() + seconds
        stage_pull(ctx, release, directory)
    else:
        push_into(ctx, release, directory, what="stage", step="staging")
    found = identities_of(FilesReport.parse(
        ctx.call("identities", directory=directory, names=names, evict=True)), names)
    if not found:
        raise StepFailed("the staged files' identities could not be read back")
    return Staged(release.id, directory, found)


class Stager:
    """Stages one release on many hosts in the background, a few at a time."""

    def __init__(self, release: Release, bus: EventBus, open_host: OpenHost,
                 workers: int = STAGING_WORKERS,
                 seconds: float = DEFAULT_STEP_TIMEOUT) -> None:  # fmt: skip
        self.release = release
        self.bus = bus
        self.open_host = open_host
        self.seconds = seconds  # a download's bound: the upload step's timeout
        self.workers = workers
        self._pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="staging")
        self._futures: dict[str, Future[Staged | None]] = {}
        self._began: set[str] = set()  # hosts where staging may have written something
        self._given: dict[str, Staged] = {}  # handed to the host's own run
        self._stop = threading.Event()
        self._lock = threading.Lock()

    def start(self, hosts: list[str]) -> None:
        for name in hosts:
            self._futures[name] = self._pool.submit(self._stage, name)

    def _stage(self, name: str) -> Staged | None:
        if self._stop.is_set():
            return None
        started = time.monotonic()
        reached = False
        try:
            with self.open_host(name) as ctx:
                reached = True
                ctx.tether = self._going_on  # a run that ends stops a download under way
                found = survey(ctx, self.release)
                why = self._why_not(found)
                if why:
                    self._emit(name, "skipped", why, found, started)
                    return None
                with self._lock:
                    self._began.add(name)
                staged = self._stage_on(ctx)
        except (RolloutError, OSError) as e:
            if not reached:
                self._emit(name, "skipped", f"unreachable ({e}): nothing staged", None, started)
            else:
                self._emit(name, "failed", f"staging failed ({type(e).__name__}: {e}); "
                           f"{self._otherwise()}", None, started)  # fmt: skip
            return None
        size = sum(a.size for a in self.release.artifacts)
        source = self.release.source
        how = f"downloaded by the host from {source}" if source else "pushed"
        self._emit(name, "ok", f"release {self.release.id} staged ({size} bytes, {how}), "
                   "sha256 verified as written", found, started, size)  # fmt: skip
        return staged

    def _stage_on(self, ctx: HostContext) -> Staged:
        """stage(); where it fails, what it left is removed at once (best effort: the run's
        end clears it otherwise)."""
        try:
            return stage(ctx, self.release, self.seconds)
        except (RolloutError, OSError):
            ctx.deadline, ctx.tether = None, lambda: None
            with contextlib.suppress(RolloutError, OSError):
                ctx.call("unstage", call_timeout=60, root=ctx.layout.root,
                         release=self.release.id)
            raise

    def _going_on(self) -> None:
        if self._stop.is_set():
            raise StepFailed("the run ended first: staging stopped")

    def _otherwise(self) -> str:
        if self.release.source:
            return "the host downloads the release at its turn, as usual"
        return "the upload sends the release as usual"

    def _why_not(self, found: Survey) -> str | None:
        if found.links:
            return (f"refused: {', '.join(found.links)} is a symbolic link: rollout never "
                    "writes through a link: nothing staged")
        if found.present:
            return f"release {self.release.id} is on the host already: nothing to stage"
        if not found.same_device:
            return "the staging folder is not on the releases' filesystem: nothing staged"
        if self._stop.is_set():
            return "the run ended first"
        return None

    def _emit(self, name: str, status: str, reason: str, found: Survey | None,
              started: float, size: int = 0) -> None:  # fmt: skip
        stale = found.stale if found else []
        self.bus.emit("staged", host=name, status=status, reason=reason, data={
            "release": self.release.id, "bytes": size, "stale_removed": stale,
            "source": self.release.source,
            "seconds": round(time.monotonic() - started, 3)})  # fmt: skip

    def take(self, name: str) -> Staged | None:
        """The host's batch begins: its staging, waited for if under way; None if it had
        not begun (then it never will) or failed."""
        future = self._futures.pop(name, None)
        if future is None or future.cancel():
            return None
        try:
            staged = future.result()
        except Exception:  # a bug in staging never fails the host: it uploads as usual
            staged = None
        if staged is not None:
            self._given[name] = staged
        return staged

    def close(self) -> None:
        """The run ends: nothing more starts, what is under way finishes, and every host
        whose staging its own run did not install is cleared (best effort, in parallel)."""
        self._stop.set()
        for future in self._futures.values():
            future.cancel()
        self._pool.shutdown(wait=True)
        leftovers = [n for n in sorted(self._began)
                     if n not in self._given or not self._given[n].installed]  # fmt: skip
        if leftovers:
            with ThreadPoolExecutor(max_workers=min(self.workers * 2, len(leftovers))) as p:
                list(p.map(self._clear, leftovers))

    def _clear(self, name: str) -> None:
        with contextlib.suppress(RolloutError, OSError), self.open_host(name) as ctx:
            ctx.call("unstage", root=ctx.layout.root, release=self.release.id)


@contextlib.contextmanager
def staging(release: Release, bus: EventBus, open_host: OpenHost, hosts: list[str],
            seconds: float = DEFAULT_STEP_TIMEOUT,
            workers: int = STAGING_WORKERS) -> Iterator[Stager | None]:  # fmt: skip
    """A Stager for `hosts` (None when there are none), closed when the body ends;
    `seconds`: the upload step's timeout, which bounds each host's download; `workers`:
    hosts staged at once (its share of rolling.concurrency)."""
    if not hosts or not release.artifacts:
        yield None
        return
    stager = Stager(release, bus, open_host, workers, seconds)
    stager.start(hosts)
    try:
        yield stager
    finally:
        stager.close()
