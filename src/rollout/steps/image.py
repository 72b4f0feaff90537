"""Controller steps: build the prover image, extract its executables."""

from __future__ import annotations

import hashlib
import io
import os
import tarfile
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from rollout.bundle import context as buildcontext
from rollout.bundle.release import release_id_of
from rollout.config.sections import BuildSpec
from rollout.errors import EnvironmentProblem, StepFailed
from rollout.jsontypes import JSONObject
from rollout.output.events import StepResult, changed, skipped
from rollout.output.progress import Emit
from rollout.steps.buildwatch import BuildWatch, heartbeat
from rollout.steps.decision import Artifact, Release
from rollout.transport.failures import docker_failure
from rollout.units import format_size

if TYPE_CHECKING:
    import docker

# Docker is imported where a build or an extract runs: a rollout of a bundle built elsewhere
# (and every other command) starts without it.


@dataclass
class ControllerContext:
    """The controller's side of a run: the build settings and what build and extract made."""

    build: BuildSpec  # the playbook's build section
    version: str
    cache_dir: Path
    image: str | None = None
    release: Release | None = None
    emit: Emit | None = None  # the run's events (the build's progress); None: none
    _client: docker.DockerClient | None = None

    def docker(self) -> docker.DockerClient:
        import docker
        from docker.errors import DockerException

        if self._client is None:
            try:
                self._client = docker.from_env(version="auto")
                self._client.ping()
            except DockerException as e:
                raise docker_failure(EnvironmentProblem, e) from e
        return self._client


def _repository(tag: str) -> str:
    """`registry:5000/name:tag` -> `registry:5000/name`."""
    last = tag.rsplit("/", 1)[-1]
    return tag.rsplit(":", 1)[0] if ":" in last else tag


def check_build_inputs(spec: BuildSpec) -> None:
    """The Dockerfile and the build context exist (a real build's context is a checkout
    that may not be on this machine)."""
    if not Path(spec.dockerfile).is_file():
        raise StepFailed(f"build.dockerfile {spec.dockerfile} does not exist", retryable=False)
    if not Path(spec.context).is_dir():
        raise StepFailed(f"build.context {spec.context} is not a folder", retryable=False)


def _context(spec: BuildSpec) -> tuple[Path, Path, list[buildcontext.Entry]]:
    check_build_inputs(spec)
    context, dockerfile = Path(spec.context), Path(spec.dockerfile)
    return context, dockerfile, buildcontext.included(context, dockerfile)


def content_tag(spec: BuildSpec, cache_dir: Path) -> str:
    """The image tag that names these build inputs: same inputs, same tag, no rebuild. The
    content is hashed once; later runs find its digest by the context's stat fingerprint."""
    context, dockerfile, entries = _context(spec)
    args = spec.build_args()
    key = buildcontext.fingerprint(context, entries, dockerfile, args)
    digest = buildcontext.cached_digest(cache_dir, key)
    if digest is None:
        digest = buildcontext.content_digest(context, entries, dockerfile, args)
        buildcontext.remember_digest(cache_dir, key, digest)
    return f"{_repository(spec.tag)}:c-{digest}"


def known_tag(spec: BuildSpec, cache_dir: Path) -> str | None:
    """The content tag when an earlier build hashed this very context (same fingerprint);
    None otherwise. Reads no file of the context: what a dry run may do."""
    context, dockerfile, entries = _context(spec)
    key = buildcontext.fingerprint(context, entries, dockerfile, spec.build_args())
    digest = buildcontext.cached_digest(cache_dir, key)
    return None if digest is None else f"{_repository(spec.tag)}:c-{digest}"


def context_summary(spec: BuildSpec) -> str:
    """What a build would send, from the file sizes alone."""
    _, _, entries = _context(spec)
    files = [e for e in entries if e.is_file]
    return (f"{len(files)} file(s), {format_size(sum(e.st.st_size for e in files))} after "
            ".dockerignore and target/")


def existing_image(ctx: ControllerContext) -> str | None:
    """The content tag when the image for these inputs is already built and an earlier
    build hashed this context (reads no file of it)."""
    from docker.errors import ImageNotFound

    tag = known_tag(ctx.build, ctx.cache_dir)
    if tag is None:
        return None
    try:
        ctx.docker().images.get(tag)
    except ImageNotFound:
        return None
    return tag


def build(ctx: ControllerContext, params: JSONObject) -> StepResult:
    from docker.errors import ImageNotFound

    spec = ctx.build
    repository = _repository(spec.tag)
    tag = content_tag(spec, ctx.cache_dir)
    client = ctx.docker()
    try:
        image = client.images.get(tag)
        image.tag(repository, spec.tag.rsplit(":", 1)[-1] if spec.tag != repository else None)
        ctx.image = tag
        return skipped(f"image {tag} for these inputs exists ({image.short_id})", image=tag)
    except ImageNotFound:
        pass
    watch = _watched_build(ctx, client, tag)
    image = client.images.get(watch.image_id)
    image.tag(repository, spec.tag.rsplit(":", 1)[-1] if spec.tag != repository else None)
    ctx.image = tag
    result = changed(f"built {tag} ({image.short_id})", image=tag, id=image.id)
    result.output = "\n".join(watch.tail)
    return result


def _watched_build(ctx: ControllerContext, client: docker.DockerClient, tag: str) -> BuildWatch:
    """Run the build, its output followed as it comes (progress events, every line for -v);
    the failing step's instruction, exit code and last lines when it fails."""
    spec, watch = ctx.build, BuildWatch(ctx.emit)
    fileobj, dockerfile = buildcontext.archive(Path(spec.context), Path(spec.dockerfile))
    try:
        watch.tick()
        with heartbeat(watch):
            for chunk in client.api.build(
                fileobj=fileobj, custom_context=True, dockerfile=dockerfile,
                buildargs=spec.build_args(), tag=tag, target=spec.target, rm=True,
                forcerm=True, decode=True,
            ):
                watch.feed(chunk)
            watch.finish()
    finally:
        fileobj.close()
    if watch.error is not None:
        raise watch.failure()
    if watch.image_id is None:
        raise StepFailed(f"docker build ended {watch.where()} without an image and without "
                         "an error (the Docker engine stopped?)", retryable=False)
    return watch


def _read_from_image(client: docker.DockerClient, image: str, path: str) -> bytes:
    container = client.containers.create(image, command=["true"])
    try:
        stream, _stat = container.get_archive(path)
        with tarfile.open(fileobj=io.BytesIO(b"".join(stream))) as tar:
            member = tar.next()
            if member is None or not member.isfile():
                raise StepFailed(f"{path} in {image} is not a file", retryable=False)
            data = tar.extractfile(member)
            assert data is not None
            return data.read()
    finally:
        container.remove(force=True)


def extract(ctx: ControllerContext, params: JSONObject) -> StepResult:
    """Copy the executables out of the image without running it; record sha256 and size."""
    if ctx.image is None:
        raise StepFailed("no image: the build step has not run", retryable=False)
    client = ctx.docker()
    image_id = client.images.get(ctx.image).id.split(":")[-1][:16]
    out_dir = ctx.cache_dir / image_id
    artifacts = []
    fresh = False
    for name, path in ctx.build.image_paths.items():
        local = out_dir / name
        if not local.exists():
            out_dir.mkdir(parents=True, exist_ok=True)
            tmp = local.with_suffix(".partial")
            tmp.write_bytes(_read_from_image(client, ctx.image, path))
            os.chmod(tmp, 0o755)
            tmp.replace(local)
            fresh = True
        data = local.read_bytes()
        artifacts.append(Artifact(name, str(local), hashlib.sha256(data).hexdigest(), len(data)))
    ctx.release = Release(release_id_of(artifacts), ctx.image, ctx.version, tuple(artifacts),
                          build_args=tuple(sorted(ctx.build.build_args().items())))
    summary = ", ".join(f"{a.name} {a.sha256[:12]} {a.size}B" for a in artifacts)
    data = {"release": ctx.release.to_dict()}
    if not fresh:
        return skipped(f"executables of {ctx.image} already extracted: {summary}", **data)
    return changed(f"extracted release {ctx.release.id}: {summary}", **data)
