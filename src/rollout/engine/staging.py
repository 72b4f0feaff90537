"""Staging ahead: while the canary batch runs, each host of the later batches receives the
release's executables into a hidden folder (<root>/rollout/staging/<release>, outside
releases/: nothing sees a release there), each hashed on the host as it is written. The
upload step of such a host then installs them by a rename instead of sending them again.

Staging is not a step: it emits `staged` events, never step_start, and a run that ends
before a host's batch removes what it staged there, so the host is left as found."""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field

from rollout.errors import RolloutError, StepFailed
from rollout.host.layout import Layout, q
from rollout.output.events import EventBus
from rollout.steps.base import HostContext
from rollout.steps.decision import Release, Staged
from rollout.steps.install import evict_command, identity_command, parse_identities, push_into

STAGING_WORKERS = 4  # hosts staged at once: the controller's CPU is shared with the canary
OpenHost = Callable[[str], contextlib.AbstractContextManager[HostContext]]


def staging_root(layout: Layout) -> str:
    return f"{layout.state_dir}/staging"


def staging_dir(layout: Layout, release_id: str) -> str:
    return f"{staging_root(layout)}/{release_id}"


def _no_links(layout: Layout) -> str:
    """Shell: true when neither the state folder nor the staging root is a symbolic link
    (rm -rf and the upload would act in the folder it points at, outside the root)."""
    return f"[ ! -L {q(layout.state_dir)} ] && [ ! -L {q(staging_root(layout))} ]"


def unstage_command(layout: Layout, release_id: str) -> str:
    """Remove this release's staging folder, and the staging root if it is then empty;
    nothing where either folder is a link."""
    return (f"if {_no_links(layout)}; then rm -rf -- {q(staging_dir(layout, release_id))}; "
            f"rmdir -- {q(staging_root(layout))} 2>/dev/null; fi; true")


def _survey_command(layout: Layout, release: Release) -> str:
    """One round trip: remove stale staging of other releases (named on stdout as
    `stale NAME`), say whether the release is installed already (`present`), and print the
    devices of the releases folder and the state folder (a rename must not become a copy)."""
    root, dest = q(staging_root(layout)), q(layout.release_dir(release.id))
    files = " ".join(f"{dest}/{q(a.name)}" for a in release.artifacts)
    links = " ".join(q(p) for p in (layout.state_dir, staging_root(layout), layout.releases))
    return (f"for p in {links}; do [ -L \"$p\" ] && echo \"link $p\"; done; "
            f"if {_no_links(layout)}; then "
            f"if [ -d {root} ]; then find {root} -mindepth 1 -maxdepth 1 ! -name "
            f"{q(release.id)} -printf 'stale %f\\n' -exec rm -rf -- {{}} + ; fi; "
            f"rm -rf -- {q(staging_dir(layout, release.id))}; fi; "
            f"if [ -f {dest}/RELEASE.json ] && ls -- {files} >/dev/null 2>&1; then "
            f"echo present; fi; "
            f"stat -c 'dev %d' -- {q(layout.releases)} {q(layout.state_dir)} 2>/dev/null; true")


@dataclass(frozen=True)
class Survey:
    stale: list[str]
    present: bool
    same_device: bool
    links: list[str] = field(default_factory=list)  # folders that are links: nothing staged


def survey(ctx: HostContext, release: Release) -> Survey:
    out = ctx.sh(_survey_command(ctx.layout, release)).check().stdout.splitlines()
    stale = [line[6:][:80] for line in out if line.startswith("stale ")]
    devices = [line for line in out if line.startswith("dev ")]
    same = len(devices) == 2 and devices[0] == devices[1]
    links = [line[5:][:200] for line in out if line.startswith("link ")]
    return Survey(stale[:20], "present" in out, same, links[:3])


def stage(ctx: HostContext, release: Release) -> Staged:
    """Stream the executables into the staging folder, each checked as it lands, evict them
    from the page cache and read their identities."""
    directory = staging_dir(ctx.layout, release.id)
    names = [a.name for a in release.artifacts]
    push_into(ctx, release, directory, what="stage", step="staging")
    r = ctx.sh(f"{evict_command(directory, names)} && {identity_command(directory, names)}")
    found = parse_identities(r.check().stdout, names)
    if not found:
        raise StepFailed("the staged files' identities could not be read back")
    return Staged(release.id, directory, found)


class Stager:
    """Stages one release on many hosts in the background, a few at a time."""

    def __init__(self, release: Release, bus: EventBus, open_host: OpenHost,
                 workers: int = STAGING_WORKERS) -> None:  # fmt: skip
        self.release = release
        self.bus = bus
        self.open_host = open_host
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
        try:
            with self.open_host(name) as ctx:
                found = survey(ctx, self.release)
                why = self._why_not(found)
                if why:
                    self._emit(name, "skipped", why, found, started)
                    return None
                with self._lock:
                    self._began.add(name)
                staged = stage(ctx, self.release)
        except (RolloutError, OSError) as e:
            self._emit(name, "failed", f"staging failed ({type(e).__name__}: {e}); the upload "
                       "sends the release as usual", None, started)  # fmt: skip
            return None
        size = sum(a.size for a in self.release.artifacts)
        self._emit(name, "ok", f"release {self.release.id} staged ({size} bytes), sha256 "
                   "verified as written", found, started, size)  # fmt: skip
        return staged

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
            with ThreadPoolExecutor(max_workers=min(STAGING_WORKERS * 2, len(leftovers))) as p:
                list(p.map(self._clear, leftovers))

    def _clear(self, name: str) -> None:
        with contextlib.suppress(RolloutError, OSError), self.open_host(name) as ctx:
            ctx.sh(unstage_command(ctx.layout, self.release.id))


@contextlib.contextmanager
def staging(release: Release, bus: EventBus, open_host: OpenHost,
            hosts: list[str]) -> Iterator[Stager | None]:  # fmt: skip
    """A Stager for `hosts` (None when there are none), closed when the body ends."""
    if not hosts or not release.artifacts or release.source:
        yield None
        return
    stager = Stager(release, bus, open_host)
    stager.start(hosts)
    try:
        yield stager
    finally:
        stager.close()
