"""The bundle's manifest: plain data, checked like any hostile input before it is used."""

from __future__ import annotations

import json
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StringConstraints, ValidationError

from rollout.bundle.release import Artifact, Release, release_id_of
from rollout.errors import Location, UserError
from rollout.host.layout import EXECUTABLE_NAME

MANIFEST = "manifest.json"
MAX_MANIFEST = 1 << 20  # bytes; a manifest is a few KiB
FORMAT: Literal["rollout-release/1"] = "rollout-release/1"

Name = Annotated[str, StringConstraints(pattern=EXECUTABLE_NAME)]
Sha256 = Annotated[str, StringConstraints(pattern=r"^[0-9a-f]{64}$")]


class Executable(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    sha256: Sha256
    size: int = Field(ge=0)


class Manifest(BaseModel):
    """What `rollout build` made: enough to check every byte and to say where it came from."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    format: Literal["rollout-release/1"] = FORMAT
    release: Annotated[str, StringConstraints(pattern=r"^[0-9a-f]{12}$")]
    version: Annotated[str, StringConstraints(max_length=200)]
    image: Annotated[str, StringConstraints(max_length=500)]
    image_digest: str | None = None
    build_args: dict[str, str] = Field(default_factory=dict)
    source_revision: str | None = None
    created: str
    executables: dict[Name, Executable] = Field(min_length=1)

    def to_json(self) -> str:
        return self.model_dump_json(indent=2) + "\n"

    def release_for(self, directory: str = "", source: str | None = None) -> Release:
        """The release this manifest describes; executables under `directory` (local)."""
        artifacts = tuple(
            Artifact(name, f"{directory}/{name}" if directory else "", e.sha256, e.size)
            for name, e in self.executables.items()
        )
        return Release(self.release, self.image, self.version, artifacts, source,
                       tuple(sorted(self.build_args.items())))

    @property
    def total_size(self) -> int:
        return sum(e.size for e in self.executables.values())


def parse_manifest(text: str, where: str) -> Manifest:
    """A manifest from JSON text; `where` names it in errors (a path or a URL). Exit 2 for
    anything malformed, and for a release id that is not its executables' digest."""
    try:
        data: Any = json.loads(text)
    except ValueError as e:
        raise UserError(f"not JSON: {e}", Location(where)) from e
    try:
        manifest = Manifest.model_validate(data)
    except ValidationError as e:
        first = e.errors()[0]
        key = ".".join(str(p) for p in first["loc"])
        raise UserError(f"{first['msg']}", Location(where, None, key or None)) from e
    expected = release_id_of(manifest.release_for().artifacts)
    if manifest.release != expected:
        raise UserError(
            f"release id {manifest.release} is not the digest of its executables "
            f"({expected}): the manifest was altered",
            Location(where, None, "release"),
        )
    return manifest


def manifest_for(
    release: Release,
    image_digest: str | None,
    build_args: dict[str, str],
    source_revision: str | None,
    created: str,
) -> Manifest:
    return Manifest(
        release=release.id,
        version=release.version,
        image=release.image,
        image_digest=image_digest,
        build_args=build_args,
        source_revision=source_revision,
        created=created,
        executables={a.name: Executable(sha256=a.sha256, size=a.size) for a in release.artifacts},
    )
