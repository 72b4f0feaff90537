"""The playbook's schema: every section and the steps, each key declared once with its type,
default and help (rollout.config.sections, rollout.config.steps). Loading, rendering and
checking a playbook file is rollout.config.playbook; the checks (playbook_checks) read
this model, so it sits below both."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any, Protocol

from pydantic import Field, PrivateAttr, model_validator

from rollout.errors import ConfigError, Location

from .inventory import Host
from .params_manifest import files_for, kind, kinds
from .sections import (
    BuildSpec,
    DaemonSpec,
    ParamsSpec,
    PreflightSpec,
    ReleaseSpec,
    RollingSpec,
    Section,
    ValidateSpec,
)
from .steps import Scope, StepSpec
from .work import WorkSpec
from .yamlfile import YamlDoc, dotted_key


class Rendering(Protocol):
    """What a loaded playbook keeps of its file to render itself again for a host
    (rollout.config.playbook.PlaybookSource)."""

    @property
    def doc(self) -> YamlDoc: ...

    def render(
        self, host_vars: Mapping[str, Any] | None = None, host: str | None = None
    ) -> Playbook: ...


class Playbook(Section):
    """A rollout playbook."""

    name: str = Field(default="rollout", description="Name shown in reports.")
    vars: dict[str, Any] = Field(
        default_factory=dict,
        description="Template variables. Overridden by inventory host vars, then by --set.",
    )
    rolling: RollingSpec = Field(default_factory=RollingSpec, description="Batches and aborts.")
    release: ReleaseSpec = Field(default_factory=ReleaseSpec, description="Releases on hosts.")
    build_section: BuildSpec | None = Field(
        default=None,
        alias="build",
        description="How the release is built. Required by the commands that build "
        "(`rollout` without --release, `rollout build`); the others do not read it.",
    )
    daemon: DaemonSpec = Field(default_factory=DaemonSpec, description="The cuzk daemon.")
    preflight: PreflightSpec = Field(
        default_factory=PreflightSpec, description="What a host must offer before it is touched."
    )
    params: ParamsSpec = Field(
        default_factory=ParamsSpec, description="Proof parameters in param_cache."
    )
    validation: ValidateSpec = Field(
        default_factory=ValidateSpec, alias="validate", description="The validation proof."
    )
    work: WorkSpec = Field(
        default_factory=WorkSpec,
        description="Work in flight before a stop: cordon, the wait and its deadline.",
    )
    steps: list[StepSpec] = Field(
        default_factory=list, min_length=1,
        description="The steps, in order. Without `steps`: build and extract where there is a "
        "build section, then one step of each host kind, named after it, in the standard "
        "order (that of Step params by kind).",
    )

    @model_validator(mode="before")
    @classmethod
    def _params_of_the_proof_kind(cls, data: Any) -> Any:
        """params.files, pce_file and pce_bytes null or absent: those of validate.proof_kind
        (no files, and the fields' defaults, without one; an unknown kind is named by its
        own check)."""
        if not isinstance(data, dict):
            return data
        params, validate = data.get("params"), data.get("validate")
        params = {} if params is None else params
        if not isinstance(params, dict):
            return data
        name = validate.get("proof_kind") if isinstance(validate, dict) else None
        known = kind(name) if isinstance(name, str) and name in kinds() else None
        filled = dict(params)
        if params.get("files") is None:
            filled["files"] = [f.as_setting() for f in files_for(known.name)] if known else []
        for key, value in (("pce_file", known and known.pce_file),
                           ("pce_bytes", known and known.pce_bytes)):
            if params.get(key) is None:
                filled.pop(key, None)
                if value is not None:
                    filled[key] = str(value)
        return {**data, "params": filled}

    _source: Rendering | None = PrivateAttr(default=None)
    _host: str | None = PrivateAttr(default=None)
    _warnings: list[str] = PrivateAttr(default_factory=list)

    @property
    def warnings(self) -> list[str]:
        """Load-time warnings (a --set name no template uses)."""
        return list(self._warnings)

    @property
    def build(self) -> BuildSpec:
        """The build section (loaded only for the commands that build)."""
        if self.build_section is None:
            raise ConfigError(
                "this command loaded the playbook without its build section", self.location()
            )
        return self.build_section

    @property
    def path(self) -> Path | None:
        return None if self._source is None else self._source.doc.path

    @property
    def host_name(self) -> str | None:
        """The host this playbook was rendered for (`for_host`), or None."""
        return self._host

    def renamed(self, host: str) -> Playbook:
        """This rendering for another host whose vars are the same (a copy naming it)."""
        copy = self.model_copy()
        copy._host = host
        return copy

    def steps_in(self, scope: Scope) -> list[StepSpec]:
        return [step for step in self.steps if step.scope == scope]

    def step(self, name: str) -> StepSpec:
        for step in self.steps:
            if step.name == name:
                return step
        raise KeyError(name)

    def for_host(self, host: Host) -> Playbook:
        """This playbook rendered again with `host.vars` between its vars and --set."""
        if self._source is None:
            return self
        return self._source.render(host.vars, host.name)

    def location(self, *path: str | int) -> Location:
        """Where a key is in the playbook file: `location("validate", "command")`."""
        if self._source is None:
            return Location("<playbook>", None, dotted_key(path))
        return self._source.doc.location(path)

    def template_context(self, host: Host | None = None, **extra: Any) -> dict[str, Any]:
        """Names for runtime templates: vars, the sections (`daemon`, `release`, `build`,
        `rolling`, `validate`) as plain data, `host` when given, then `extra`
        (the engine's `release_dir`, `release_id`, ...)."""
        context = dict(self.vars)
        context |= self.model_dump(mode="json", by_alias=True, exclude={"vars", "steps", "name"})
        if host is not None:
            context["host"] = host.as_context()
        return context | extra
