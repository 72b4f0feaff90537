"""Upload by host pull: the host downloads a published release itself (host/scripts/fetch.py),
into a partial folder kept between attempts so that a cut download resumes. A host that
cannot reach the URL at all gets the executables pushed from the controller instead."""

from __future__ import annotations

from typing import Any

from rollout.errors import StepFailed
from rollout.host.layout import q
from rollout.output.events import StepResult, changed
from rollout.steps.base import HostContext, Release
from rollout.steps.release import install_partial, push_into


def pull_dir(ctx: HostContext, release: Release) -> str:
    return f"{ctx.layout.releases}/.partial-{release.id}-pull"


def _fetch_args(release: Release, partial: str, urls: dict[str, str]) -> list[str]:
    args = ["--dir", partial]
    for a in release.artifacts:
        args += ["--file", a.name, urls[a.name], a.sha256, str(a.size)]
    return args


def _forget_other_pulls(ctx: HostContext, keep: str) -> None:
    """Partial pulls of other releases are abandoned: the host lock makes this the only one."""
    ctx.sh(
        f"find {q(ctx.layout.releases)} -mindepth 1 -maxdepth 1 -name '.partial-*-pull' "
        f"! -path {q(keep)} -exec rm -rf -- {{}} + 2>/dev/null; true"
    )


def pull_release(ctx: HostContext, release: Release) -> StepResult:
    from rollout.bundle.remote import local_copy, release_urls

    assert release.source is not None
    partial = pull_dir(ctx, release)
    _forget_other_pulls(ctx, partial)
    ctx.sh(f"mkdir -p {q(partial)}").check()
    urls = release_urls(release)
    code, report = ctx.script("fetch", *_fetch_args(release, partial, urls), "--retries", 3,
                              own_process=True)  # minutes long: `ps` shows what it fetches
    error = report.get("error") if isinstance(report, dict) else {"message": str(report)}
    if code == 0 and not error:
        install_partial(ctx, release, partial)
        return _pulled(release, report)
    if error and error.get("kind") == "unreachable":
        local_copy(release, urls)
        pushed = push_into(ctx, release, partial)
        install_partial(ctx, release, partial, checked=True)
        return changed(
            f"pushed release {release.id} from the controller ({pushed} bytes): the host "
            f"could not reach {release.source}: {error.get('message')}",
            release=release.id, bytes_pushed=pushed, bytes_pulled=0, fallback=True,
        )  # fmt: skip
    kind = str((error or {}).get("kind"))
    raise StepFailed(
        f"host download of release {release.id} from {release.source} failed ({kind}): "
        f"{(error or {}).get('message')}",
        retryable=kind != "sha256",
    )


def _pulled(release: Release, report: dict[str, Any]) -> StepResult:
    files = report.get("files") or {}
    received = sum(int(f.get("received") or 0) for f in files.values())
    resumed = {n: f["resumed_from"] for n, f in files.items() if f.get("resumed_from")}
    note = "; resumed " + ", ".join(f"{n} from byte {b}" for n, b in resumed.items())
    return changed(
        f"host pulled release {release.id} from {release.source} ({received} bytes"
        f"{note if resumed else ''}), sha256 verified on host",
        release=release.id, bytes_pushed=0, bytes_pulled=received, resumed=resumed,
    )  # fmt: skip
