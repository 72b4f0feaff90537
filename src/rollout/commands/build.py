"""`rollout build`: build and extract once, on the controller, and write a release bundle.

A command (it runs the engine's build), so it sits with the commands, above the engine;
the bundle package below the steps only reads, writes and fetches bundles."""

from __future__ import annotations

import time
from pathlib import Path

from rollout.bundle.local import write_bundle
from rollout.bundle.manifest import Manifest, manifest_for
from rollout.bundle.revision import source_revision
from rollout.config.playbook import Playbook
from rollout.engine.plan import Plan
from rollout.engine.run import Engine
from rollout.errors import RolloutError, StepFailed
from rollout.output.events import EventBus
from rollout.steps.image import ControllerContext
from rollout.transport.base import Transport


def _manifest(ctx: ControllerContext) -> Manifest:
    assert ctx.release is not None and ctx.image is not None
    spec = ctx.build
    return manifest_for(
        ctx.release,
        image_digest=str(ctx.docker().images.get(ctx.image).id),
        build_args=spec.build_args(),
        source_revision=source_revision(Path(spec.context), Path(spec.dockerfile)),
        created=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    )


def build_bundle(playbook: Playbook, out: Path, bus: EventBus, cache_dir: Path) -> Manifest:
    """Run the playbook's build and extract steps, then write the bundle to `out`."""
    plan = Plan(bus.run_id, playbook, [], [])
    engine = Engine(plan, bus, _no_hosts, cache_dir)
    ctx = engine.build()
    if ctx is None or ctx.release is None:
        raise StepFailed("the build did not complete: no bundle written", retryable=False)
    manifest = _manifest(ctx)
    write_bundle(out, ctx.release, manifest)
    return manifest


def _no_hosts(host: object) -> Transport:
    raise RolloutError("rollout build touches no host")
