"""upload: put the release on the host, sha256 verified."""

from __future__ import annotations

import contextlib
import uuid

from rollout.config.steps import KindRule, NoParams
from rollout.errors import StepFailed, TransportError
from rollout.host.facts import HostFacts
from rollout.output.events import StepResult, changed
from rollout.steps.base import HostContext, Kind
from rollout.steps.decision import (
    Action,
    Call,
    Decision,
    Release,
    Skip,
    Target,
)
from rollout.steps.install import install_partial, install_staged, push_into
from rollout.steps.pull import pull_release
from rollout.steps.release import need_release, without_release


def decide(facts: HostFacts, target: Target, params: NoParams) -> Decision:
    release = target.release
    if release is None:
        return without_release(target, params, "upload")
    dest = target.layout.release_dir(release.id)
    missing = [a for a in release.artifacts if facts.digest(f"{dest}/{a.name}") != a.sha256]
    if not missing:
        reason = f"release {release.id} already on host, sha256 matches"
        return Skip(reason, {"release": release.id})
    size = sum(a.size for a in missing)
    names = ", ".join(a.name for a in missing)
    return Action(f"upload release {release.id}: {names} ({size} bytes)", params,
                  calls=() if release.source else push_calls(target, release))


def push_calls(target: Target, release: Release) -> tuple[Call, ...]:
    """A push: each executable put (SFTP, its sha256 read back on the host), then the
    partial folder installed (ops.install_release). The partial folder's name is the run's;
    a release staged during the canary is installed by the rename alone, and a published
    one (release.source) is fetched by the host: neither is listed here yet."""
    puts = tuple(Call("put", {"name": a.name, "sha256": a.sha256, "size": a.size},
                      runtime=("path",)) for a in release.artifacts)
    return (*puts, Call("install_release", {"root": target.layout.root, "release": release.id,
                                            "names": [a.name for a in release.artifacts]},
                        runtime=("partial", "manifest")))


def apply(ctx: HostContext, action: Action) -> StepResult:
    release = need_release(ctx)
    if release.source:  # a published bundle: the host downloads it itself
        return pull_release(ctx, release)
    if install_staged(ctx, release):
        return changed(
            f"installed release {release.id}, staged during the canary (sha256 verified as "
            "written)", release=release.id, bytes=0, staged=True,
        )  # fmt: skip
    partial = f"{ctx.layout.releases}/.partial-{release.id}-{uuid.uuid4().hex[:8]}"
    try:
        push_into(ctx, release, partial)
        install_partial(ctx, release, partial, checked=True)
    except BaseException:
        with contextlib.suppress(TransportError, StepFailed):  # the original error stays
            ctx.call("remove_partial", root=ctx.layout.root, name=partial.rsplit("/", 1)[-1])
        raise
    size = sum(a.size for a in release.artifacts)
    return changed(
        f"uploaded release {release.id} ({size} bytes), sha256 verified on host",
        release=release.id,
        bytes=size,
    )


KIND = Kind("upload", NoParams, KindRule("untouched", changes=True), place=30,
            decide=decide, apply=apply)
