"""Controller steps: build the prover image, extract its executables."""

from __future__ import annotations

import hashlib
import io
import os
import tarfile
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rollout.errors import EnvironmentProblem, StepFailed
from rollout.output.events import StepResult, changed, skipped
from rollout.secrets import tail
from rollout.steps.decision import Artifact, Release
from rollout.steps.manifest import release_id_of

if TYPE_CHECKING:
    import docker

# Docker is imported where a build or an extract runs: a rollout of a bundle built elsewhere
# (and every other command) starts without it.


@dataclass
class ControllerContext:
    """The controller's side of a run: the build settings and what build and extract made."""

    build: Any  # the playbook's build section
    version: str
    cache_dir: Path
    image: str | None = None
    release: Release | None = None
    _client: docker.DockerClient | None = None

    def docker(self) -> docker.DockerClient:
        import docker
        from docker.errors import DockerException

        if self._client is None:
            try:
                self._client = docker.from_env(version="auto")
                self._client.ping()
            except DockerException as e:
                raise EnvironmentProblem(f"the Docker engine does not answer: {e}") from e
        return self._client


def context_digest(context: Path, dockerfile: Path, args: dict[str, str]) -> str:
    """Content hash of everything that goes into a build: the tag names these inputs."""
    h = hashlib.sha256()
    for path in sorted(p for p in context.rglob("*") if p.is_file()):
        h.update(str(path.relative_to(context)).encode() + b"\0" + path.read_bytes())
    h.update(dockerfile.read_bytes())
    for key in sorted(args):
        h.update(f"{key}={args[key]}\0".encode())
    return h.hexdigest()[:16]


def _repository(tag: str) -> str:
    """`registry:5000/name:tag` -> `registry:5000/name`."""
    last = tag.rsplit("/", 1)[-1]
    return tag.rsplit(":", 1)[0] if ":" in last else tag


def check_build_inputs(spec: Any) -> None:
    """The Dockerfile and the build context exist (a real build's context is a checkout
    that may not be on this machine)."""
    if not Path(spec.dockerfile).is_file():
        raise StepFailed(f"build.dockerfile {spec.dockerfile} does not exist", retryable=False)
    if not Path(spec.context).is_dir():
        raise StepFailed(f"build.context {spec.context} is not a folder", retryable=False)


def content_tag(spec: Any) -> str:
    """The image tag that names these build inputs: same inputs, same tag, no rebuild."""
    check_build_inputs(spec)
    args = {k: str(v) for k, v in (spec.args or {}).items()}
    digest = context_digest(Path(spec.context), Path(spec.dockerfile), args)
    return f"{_repository(spec.tag)}:c-{digest}"


def existing_image(ctx: ControllerContext) -> str | None:
    """The content tag when the image for these inputs is already built (reads only)."""
    from docker.errors import ImageNotFound

    tag = content_tag(ctx.build)
    try:
        ctx.docker().images.get(tag)
    except ImageNotFound:
        return None
    return tag


def build(ctx: ControllerContext, params: dict[str, Any]) -> StepResult:
    from docker.errors import BuildError, ImageNotFound

    spec = ctx.build
    context, dockerfile = Path(spec.context), Path(spec.dockerfile)
    args = {k: str(v) for k, v in (spec.args or {}).items()}
    repository = _repository(spec.tag)
    tag = content_tag(spec)
    client = ctx.docker()
    try:
        image = client.images.get(tag)
        image.tag(repository, spec.tag.rsplit(":", 1)[-1] if spec.tag != repository else None)
        ctx.image = tag
        return skipped(f"image {tag} for these inputs exists ({image.short_id})", image=tag)
    except ImageNotFound:
        pass
    try:
        image, _logs = client.images.build(
            path=str(context),
            dockerfile=str(dockerfile.resolve()),
            buildargs=args,
            tag=tag,
            target=spec.target,
            rm=True,
            forcerm=True,
        )
        image.tag(repository, spec.tag.rsplit(":", 1)[-1] if spec.tag != repository else None)
    except BuildError as e:
        lines = [str(chunk.get("stream", chunk.get("error", ""))) for chunk in e.build_log]
        raise StepFailed(
            f"docker build failed: {e.msg}", retryable=False, output=tail("".join(lines), 3000)
        ) from e
    ctx.image = tag
    return changed(f"built {tag} ({image.short_id})", image=tag, id=image.id)


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


def extract(ctx: ControllerContext, params: dict[str, Any]) -> StepResult:
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
    ctx.release = Release(release_id_of(artifacts), ctx.image, ctx.version, tuple(artifacts))
    summary = ", ".join(f"{a.name} {a.sha256[:12]} {a.size}B" for a in artifacts)
    data = {"release": ctx.release.to_dict()}
    if not fresh:
        return skipped(f"executables of {ctx.image} already extracted: {summary}", **data)
    return changed(f"extracted release {ctx.release.id}: {summary}", **data)
