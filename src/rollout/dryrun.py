"""--dry-run: read facts, print each host's plan, change nothing on any host.

On the controller it only reads: an image already built for these inputs gives the release
id (its executables are copied out to the local cache); otherwise the plan says a build
would come first and the upload cannot be checked yet.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from rollout.errors import RolloutError
from rollout.layout import Layout
from rollout.plan import Plan
from rollout.steps import image
from rollout.steps.base import HostContext, Release
from rollout.steps.daemon import runs_release
from rollout.steps.release import release_mismatches
from rollout.transport.base import Transport
from rollout.units import format_size


def host_summary(facts: dict[str, Any]) -> str:
    daemon = facts.get("daemon") or {}
    memory = (facts.get("cgroup") or {}).get("memory") or {}
    return (
        f"release {facts.get('current_release') or 'none'}, daemon "
        f"{daemon.get('state') or 'none'}, memory {format_size(memory.get('usage'))} of "
        f"{format_size(memory.get('limit'))}"
    )


def known_release(plan: Plan, cache_dir: Any) -> Release | None:
    ctx = image.ControllerContext(plan.playbook.build, plan.version, cache_dir)
    ctx.image = image.existing_image(ctx)
    if ctx.image is None:
        print(f"  controller: build: would build {image.content_tag(plan.playbook.build)}")
        return None
    image.extract(ctx, {})
    assert ctx.release is not None
    print(f"  controller: build: image {ctx.image} exists; release {ctx.release.id}")
    return ctx.release


def step_outlook(ctx: HostContext, kind: str) -> str:
    """What a step would do, from read-only checks where they are cheap."""
    release = ctx.release
    if release is None:
        return "would run"
    on_host = ctx.layout.release_dir(release.id)
    if kind == "upload" and not release_mismatches(ctx, on_host, release):
        return f"would skip: release {release.id} already on host, sha256 matches"
    if kind in ("stop", "drain", "switch", "start") and runs_release(ctx) is not None:
        return f"would skip: the daemon already runs release {release.id}"
    return "would run"


def dry_run(
    plan: Plan, connect: Callable[[Any], Transport], cache_dir: Any, given: Release | None = None
) -> None:
    print(f"plan {plan.run_id}: version {plan.version or '-'}, batches {plan.batches}")
    if given is not None:
        print(f"  controller: release {given.id} from a bundle: nothing to build")
    release = given or known_release(plan, cache_dir)
    for name in plan.host_names:
        try:
            transport = connect(plan.host(name))
        except RolloutError as e:
            print(f"  {name}: UNREACHABLE: {e}")
            continue
        try:
            ctx = HostContext(
                host=plan.host(name),
                transport=transport,
                layout=Layout(plan.root),
                settings=plan.settings_for(name),
                release=release,
            )
            print(f"  {name}: {host_summary(ctx.facts())}")
            for spec in plan.host_steps:
                print(f"    {spec.name} ({spec.kind.value}) {step_outlook(ctx, spec.kind.value)}")
        finally:
            transport.close()
