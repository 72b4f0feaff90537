"""The sections of a playbook (rolling, release, build, daemon, validate), declared once:
these models validate the YAML and generate docs/options.md."""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    StringConstraints,
    ValidationInfo,
    field_validator,
)

from rollout.host.layout import EXECUTABLE_NAME

from .batches import BatchSize, parse_serial
from .durations import Seconds

_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([KMGT]i?B|B)?\s*$", re.IGNORECASE)
_UNITS = {"": 1, "b": 1, "kb": 10**3, "mb": 10**6, "gb": 10**9, "tb": 10**12}
_UNITS |= {"kib": 2**10, "mib": 2**20, "gib": 2**30, "tib": 2**40}


def parse_size(text: str) -> int:
    """'64MiB' -> 67108864; '5GB' -> 5000000000; a bare number is bytes."""
    match = _SIZE.match(text)
    if match is None:
        raise ValueError(f"not a size like '64MiB' or '5GiB': {text!r}")
    return int(float(match.group(1)) * _UNITS[(match.group(2) or "").lower()])


def _check_size(text: str) -> str:
    parse_size(text)
    return text


def _check_remote_path(text: str) -> str:
    if not text.startswith("/"):
        raise ValueError(f"must be an absolute path on the host, got {text!r}")
    return text


def _check_listen(text: str) -> str:
    host, _, port = text.rpartition(":")
    if not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ValueError(f"must be HOST:PORT, got {text!r}")
    return text


def _check_regex(text: str) -> str:
    try:
        re.compile(text)
    except re.error as exc:
        raise ValueError(f"invalid regular expression: {exc}") from None
    return text


def _resolve_local(path: Path, info: ValidationInfo) -> Path:
    """Relative to the playbook file's folder (validation context `base_dir`)."""
    path = path.expanduser()
    base = (info.context or {}).get("base_dir")
    if path.is_absolute() or base is None:
        return path
    return Path(os.path.normpath(Path(base) / path))


Size = Annotated[str, AfterValidator(_check_size)]
RemotePath = Annotated[str, AfterValidator(_check_remote_path)]
LocalPath = Annotated[Path, AfterValidator(_resolve_local)]
Listen = Annotated[str, AfterValidator(_check_listen)]
Regex = Annotated[str, AfterValidator(_check_regex)]
Executable = Annotated[str, StringConstraints(pattern=EXECUTABLE_NAME)]
Signal = Literal["SIGTERM", "SIGINT", "SIGKILL", "SIGQUIT", "SIGHUP", "SIGUSR1", "SIGUSR2"]


def _canary_first() -> list[BatchSize]:
    return [1, "100%"]


class Section(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, coerce_numbers_to_str=True)


class RollingSpec(Section):
    """How hosts are batched, and when the rollout stops."""

    serial: list[BatchSize] = Field(
        default_factory=lambda: _canary_first(),
        description='Batch sizes: an int, a share like "25%", or a list of those (the last '
        "repeats). The first batch is the canary.",
    )
    max_fail_percentage: float = Field(
        default=0,
        ge=0,
        le=100,
        description="Abort when failed hosts exceed this share of the run (%).",
    )
    pause_between_batches: Seconds = Field(
        default=0, ge=0, description="Seconds to wait between batches."
    )
    rollback_on_abort: Literal["none", "all"] = Field(
        default="none",
        description="After an abort: `none` leaves hosts as they are, `all` switches "
        "every host of the run back to its previous release.",
    )

    lock_stale_after: Seconds = Field(
        default=300,
        gt=0,
        description="Seconds without a heartbeat after which a host lock counts as stale "
        "(then --break-lock may break it). A running rollout refreshes its locks six times "
        "in this span.",
    )

    @field_validator("serial", mode="before")
    @classmethod
    def _serial(cls, value: Any) -> list[BatchSize]:
        return parse_serial(value)


class ReleaseSpec(Section):
    """Where releases live on the hosts."""

    root: RemotePath = Field(
        default="/data", description="Everything rollout writes on a host is under this."
    )
    keep: int = Field(
        default=3, ge=1, description="Releases kept per host (the current one included)."
    )
    executables: list[Executable] = Field(
        default_factory=lambda: ["cuzk-daemon", "cuzk-bench"],
        min_length=1,
        description="Executables that make up a release.",
    )


class BuildSpec(Section):
    """How the release is built on the controller (docker build, then copied out)."""

    dockerfile: LocalPath = Field(description="Dockerfile, relative to the playbook file.")
    context: LocalPath = Field(description="Build context folder, relative to the playbook file.")
    tag: str = Field(default="rollout/prover:latest", description="Image tag to build.")
    target: str | None = Field(
        default=None, description="Build stage to stop at (docker --target)."
    )
    args: dict[str, str] = Field(default_factory=dict, description="Build arguments.")
    image_paths: dict[Executable, RemotePath] = Field(
        description="Where each executable is inside the image: name -> absolute path."
    )


class DrainSpec(Section):
    """Waiting for the old daemon's memory to come back after it stopped: drained when the
    process is gone and the headroom under the limit fits the new daemon's budget, or the
    working set is back where it was before the old daemon started."""

    deadline: Seconds = Field(default=300, gt=0, description="Seconds before the drain gives up.")
    plateau: Seconds = Field(
        default=30,
        gt=0,
        description="Seconds the working set (usage minus reclaimable page cache) may stay "
        "flat, once the old daemon is gone, before the drain fails early and names what "
        "still holds the memory (processes, /dev/shm files).",
    )
    zombie_grace: Seconds = Field(
        default=5,
        ge=0,
        description="Seconds a zombie (defunct) daemon may linger before it is reported.",
    )


class DaemonSpec(Section):
    """The cuzk daemon: its configuration, and how it is stopped and started."""

    config_path: RemotePath = Field(default="/data/zk/cuzk.toml", description="Daemon config file.")
    listen: Listen = Field(default="127.0.0.1:9820", description="gRPC address ([daemon] listen).")
    status_listen: Listen = Field(
        default="127.0.0.1:9821", description="HTTP status address ([daemon] status_listen)."
    )
    total_budget: str = Field(
        default="cgroup",
        description='Memory budget: "cgroup" (the container\'s cgroup limit minus '
        "safety_margin, never the host's RAM) or a size such as 400GiB.",
    )
    safety_margin: Size = Field(
        default="64MiB", description="Memory kept free ([memory] safety_margin)."
    )
    param_cache: RemotePath = Field(
        default="/data/zk/params", description="[srs] param_cache (writable)."
    )
    config_template: LocalPath | None = Field(
        default=None,
        description="Jinja2 TOML template for the config, relative to the playbook file "
        "(rendered at run time); null: the built-in one.",
    )
    extra_config: dict[str, Any] = Field(
        default_factory=dict, description="Extra TOML sections/keys merged into the config."
    )
    stop_signal: Signal = Field(default="SIGTERM", description="Signal that stops the daemon.")
    stop_grace: Seconds = Field(
        default=10, ge=0, description="Seconds after stop_signal before SIGKILL."
    )
    drain: DrainSpec = Field(default_factory=DrainSpec, description="Memory drain after stop.")
    ready_timeout: Seconds = Field(default=60, gt=0, description="Seconds for the ports to answer.")

    @field_validator("total_budget")
    @classmethod
    def _budget(cls, value: str) -> str:
        return value if value == "cgroup" else _check_size(value)


class PreflightSpec(Section):
    """What preflight checks on a host before the old daemon is touched (besides disk
    space, the memory limit and the validation input)."""

    cpu_flags: list[str] = Field(
        default_factory=lambda: ["adx"],
        description="CPU flags (/proc/cpuinfo) the build needs: supraseal uses ADX when the "
        "build machine has it. []: a portable build, no check.",
    )
    gpus: bool = Field(
        default=True,
        description="Check that nvidia-smi lists daemon.gpu_devices (any GPU when that is "
        "empty). Usually a host var: false on hosts without GPUs, like the lab's.",
    )
    min_budget: Size = Field(
        default="0",
        description="The least memory budget the validation's proof type needs; a smaller "
        "budget is refused at preflight, naming both numbers.",
    )
    adopt: bool = Field(
        default=False,
        description="Take over a cuzk daemon that rollout's supervisor did not start (one "
        "started by hand or by a script): it is stopped and drained like rollout's own, "
        "and the supervisor's daemon replaces it. false: preflight refuses such a host, "
        "naming the daemon. `rollout rollout --adopt`, or a host var (docs/adopt.md).",
    )


class InputSpec(Section):
    """The validation proof's input file on the host."""

    path: RemotePath = Field(
        default="/data/32gbench/c1.json", description="Input file on the host."
    )
    size: int | None = Field(
        default=None,
        ge=1,
        description="Expected size in bytes (a real 32 GiB PoRep C1 is about 51 MB); "
        "null: not checked.",
    )
    sha256: str | None = Field(
        default=None,
        pattern=r"^[0-9a-fA-F]{64}$",
        description="Expected sha256; null: not checked.",
    )
    source: LocalPath | None = Field(
        default=None,
        description="Local file staged to `path` when the host lacks it or its sha256 "
        "differs (relative to the playbook file); null: the host must already have it.",
    )


class ValidateSpec(Section):
    """The proof that shows a new release works. Success is the output, never the exit code."""

    command: str = Field(
        default="{{ release_dir }}/cuzk-bench -a http://{{ daemon.listen }} single -t porep "
        "--c1 {{ validate.input.path }}",
        description="Command run on the host (runtime template: `release_dir`, `host`, ...).",
    )
    success_pattern: Regex = Field(
        default=r"^status:\s+COMPLETED", description="Regex (multiline) the output must match."
    )
    timeout: Seconds = Field(
        default=600,
        gt=0,
        description="Seconds the command may run (cuzk-bench has no timeout of its own; a "
        "budget too small for the proof blocks it forever). Still running then: killed, "
        "reported as hung with the daemon's /status counters before and after, and the "
        "host is rolled back.",
    )
    input: InputSpec = Field(default_factory=InputSpec, description="The proof's input file.")
