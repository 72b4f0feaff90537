"""The sections of a playbook (rolling, release, build, daemon, validate), declared once:
these models validate the YAML and generate docs/options.md."""

from __future__ import annotations

import ipaddress
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

from . import cuda
from .batches import BatchSize, parse_serial
from .durations import Seconds
from .params_manifest import bench_type_asked, kind, kinds

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


_CUZK_SIZE = re.compile(r"^\s*\d+\s*(GiB|MiB|GB|MB)?\s*$")


def _check_cuzk_size(text: str) -> str:
    """Only what cuzk's parse_size reads: whole GiB, MiB, GB, MB or bytes (case matters).
    cuzk silently reads anything else (1.5GiB, 1TiB, 512KiB, 64mib) as 50 GiB."""
    if not _CUZK_SIZE.match(text):
        raise ValueError(
            f"cuzk reads only whole GiB, MiB, GB, MB or bytes (like 5GiB, 512MiB, 1073741824), "
            f"got {text!r}: anything else it silently takes as 50GiB"
        )
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


def _check_grpc_listen(text: str) -> str:
    """cuzk parses [daemon] listen as a socket address: an IP literal, never a host name."""
    host = _check_listen(text).rpartition(":")[0]
    try:
        ipaddress.ip_address(host[1:-1] if host.startswith("[") else host)
    except ValueError:
        raise ValueError(
            f"cuzk needs an IP address and a port here (like 127.0.0.1:9820), got {text!r}"
        ) from None
    return text


def _check_regex(text: str) -> str:
    try:
        re.compile(text)
    except re.error as exc:
        raise ValueError(f"invalid regular expression: {exc}") from None
    return text


ENV_NAME = re.compile(r"^[A-Za-z][A-Za-z0-9_]*$")
"""An `env:` name: written in the playbook itself (never a value), an identifier that does
not start with `_` (`_JAVA_OPTIONS`)."""
CODE_NAMESPACES = (
    "LD_", "DYLD_", "PYTHON", "PERL", "RUBY", "NODE", "NPM_", "LUA", "JAVA", "JDK_", "GIT_",
    "SSH_", "BASH", "ZSH", "KSH", "GCONV", "MALLOC_", "GLIBC_", "OPENSSL", "SSL_", "LESS",
    "GEM_", "BUNDLE", "PHP", "TCL", "GUILE", "DOTNET_", "CORECLR_", "CARGO_", "RUSTC",
    "PIP_", "CONDA", "VIRTUAL_ENV", "XDG_", "SUDO_", "TERMINFO", "NLSPATH", "LOCPATH",
    "HOSTALIASES", "RES_OPTIONS",
)
"""Prefixes of the names a runtime reads for itself (the loader, interpreters, git, ssh,
less, OpenSSL, ...): the whole family, so that a name not seen before is covered too."""
CODE_WORD = re.compile(
    r"PATH|LIB|INC|INIT|CONF|CFG|OPT|FLAGS|DIR|HOME|ROOT|PRELOAD|AUDIT|COMMAND|CMD|EXEC|"
    r"SHELL|ENV|OPEN|PAGER|EDITOR|VISUAL|BROWSER|ASKPASS|HOOK|PLUGIN|MODULE|STARTUP|"
    r"PROFILE|PROMPT|PS[0-9]|IFS$|RC$|FUNC|PROGRAM|LOADER|INTERP|GLOB|HIST"
)
CODE_WORD_END = re.compile(
    r"(?:PATH|LIB|INIT|CONF|RC|OPTS?|FLAGS|DIR|HOME|ROOT|PRELOAD|COMMAND|CMD|SHELL|ENV|OPEN|"
    r"PAGER|EDITOR|STARTUP|PROFILE|PROMPT)$"
)
"""Words of a name (split at `_`) that say it holds code or where code is found, at the
word's start (`NODE_PATH`, `LUA_INIT`, `OPENSSL_CONF`, `GIT_SSH_COMMAND`, `PAGER`) or fused
at its end (`RUBYLIB`, `LESSOPEN`, `ZDOTDIR`, `CDPATH`, `ZSHRC`)."""


def code_name(name: str) -> bool:
    """Whether a runtime may read this name as code or as a place to load code from."""
    upper = name.upper()
    words = [w for w in upper.split("_") if w]
    return upper.startswith(CODE_NAMESPACES) or any(
        CODE_WORD.match(w) or CODE_WORD_END.search(w) for w in words
    )


def _check_env_name(name: str) -> str:
    """An `env:` name by allowlist: a plain identifier written in the playbook, and none
    that a common runtime reads as code or a code path (`_code_name`): a value there would be
    code. Pick a name of your own (`V`, `SECTOR`, `CUZK_INPUT`)."""
    if not ENV_NAME.match(name):
        raise ValueError(
            f"an environment variable name is an identifier starting with a letter, got {name!r}"
        )
    if code_name(name):
        raise ValueError(
            f"{name}: a name that a program may read as code or as where code is (a path, a "
            "library, an init file, options, a command, a pager, ...); a value there would "
            "be code: name it after what it holds instead (like V or SECTOR_NUM)"
        )
    return name


def _resolve_local(path: Path, info: ValidationInfo) -> Path:
    """Relative to the playbook file's folder (validation context `base_dir`)."""
    path = path.expanduser()
    base = (info.context or {}).get("base_dir")
    if path.is_absolute() or base is None:
        return path
    return Path(os.path.normpath(Path(base) / path))


def _resolve_source(text: str | None, info: ValidationInfo) -> str | None:
    """A URL is kept; a local path is made absolute against the playbook's folder; an empty
    one (`--set params_source=`) is None."""
    if text is None or not text.strip():
        return None
    if re.match(r"^https?://", text):
        return text
    return str(_resolve_local(Path(text), info))


Size = Annotated[str, AfterValidator(_check_size)]
CuzkSize = Annotated[str, AfterValidator(_check_cuzk_size)]
Source = Annotated[str | None, AfterValidator(_resolve_source)]
RemotePath = Annotated[str, AfterValidator(_check_remote_path)]
LocalPath = Annotated[Path, AfterValidator(_resolve_local)]
Listen = Annotated[str, AfterValidator(_check_listen)]
GrpcListen = Annotated[str, AfterValidator(_check_grpc_listen)]
Regex = Annotated[str, AfterValidator(_check_regex)]
Executable = Annotated[str, StringConstraints(pattern=EXECUTABLE_NAME)]
EnvName = Annotated[str, AfterValidator(_check_env_name)]
Argv = Annotated[list[str], Field(min_length=1)]
CommandField = str | Argv
"""A user command: a shell command line (its words quoted one by one), or an argv list
(each item one argument: no shell at all)."""
COMMAND_HELP = (
    " A string is a shell command line for the playbook's own constants and rollout's paths "
    "(`release_dir`): a value from outside the playbook (--set, the inventory, `host`) in it "
    "is refused at load; give such a value as an item of an argv list (no shell) or in env. "
    "A value that starts with `-` is refused where the playbook did not declare an option: "
    "`{{ v | option }}`."
)
ENV_HELP = (
    "Environment variables for the command: name -> value (a runtime template). The "
    'command reads them as "$NAME": the way to hand a value from outside the playbook to a '
    "shell (one that starts with `-` is refused unless declared: `{{ v | option }}`). "
    "Names that a runtime reads as code or a code path (PATH, LD_*, PYTHON*, NODE_*, "
    "LUA_INIT, GIT_*, *_OPTIONS, *LIB, *_CONF, PAGER, ...) are refused."
)
Signal = Literal["SIGTERM", "SIGINT", "SIGKILL", "SIGQUIT", "SIGHUP", "SIGUSR1", "SIGUSR2"]


def _canary_first() -> list[BatchSize]:
    return [1, "100%"]


class Section(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, coerce_numbers_to_str=True)


CONCURRENCY = 64
"""rolling.concurrency's default: a 2-core controller works 64 hosts at once with CPU to
spare (docs/bench.md), and a larger fleet is worked through it; Ansible's forks is 5."""


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
    concurrency: int = Field(
        default=CONCURRENCY,
        ge=1,
        le=1024,
        description="Hosts worked on at once, as Ansible's forks: a batch larger than this is "
        "worked through it (a host starts as another ends), staging ahead takes its share of "
        "it (up to 4; none below 2), and taking and giving back the locks and diagnose go "
        "through it too. The lock heartbeat refreshes beside it, in threads of its own (twice "
        "this; one short call each, which never holds up another host's): up to three times "
        "this many hosts may have a call under way at once. A refresh waits at most half "
        "a heartbeat for its host's step: while a call still runs in the host's agent (a "
        "validation proof may outlast `rolling.lock_stale_after`), it goes on an SSH channel "
        "of its own. Each locked "
        "host's connection stays open for the run.",
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


_LABEL = r"[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?"
_DOMAIN = rf"(?:{_LABEL}(?:\.{_LABEL})*(?::[0-9]+)?/)?"
_COMPONENT = r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*"
IMAGE_REFERENCE = re.compile(
    rf"^{_DOMAIN}{_COMPONENT}(?:/{_COMPONENT})*(?::[A-Za-z0-9_][A-Za-z0-9_.-]{{0,127}})?$"
)
"""An image name as Docker's reference grammar has it (distribution/reference), with an
optional tag and no digest."""


class BuildSpec(Section):
    """How the release is built on the controller (docker build, then copied out)."""

    dockerfile: LocalPath = Field(description="Dockerfile, relative to the playbook file.")
    context: LocalPath = Field(description="Build context folder, relative to the playbook file.")
    tag: str = Field(default="rollout/prover:latest", description="Image tag to build.")
    target: str | None = Field(
        default=None, description="Build stage to stop at (docker --target)."
    )
    cuda_archs: str | None = Field(
        default=None,
        description='GPU architectures to build for, space separated ("86 89 120": sm_XX '
        "without the sm_), passed as the CUDA_ARCHS build argument; they choose the CUDA "
        "base (docs/real-fleet.md has the table: 120, RTX 50xx, needs 12.8). null: not a "
        "CUDA build (the lab's stand-in).",
    )
    cuda_base: str | None = Field(
        default=None,
        description="The CUDA devel image, passed as CUDA_BASE; one that cannot build an "
        "architecture of cuda_archs is refused. null: the oldest base rollout knows that "
        "builds them all.",
    )
    args: dict[str, str] = Field(default_factory=dict, description="Build arguments.")
    image_paths: dict[Executable, RemotePath] = Field(
        description="Where each executable is inside the image: name -> absolute path."
    )

    @field_validator("tag")
    @classmethod
    def _tag(cls, value: str) -> str:
        if not IMAGE_REFERENCE.match(value):
            raise ValueError(
                f"{value!r} is not a Docker image name with an optional tag, like "
                "registry:5000/name:v1 (a tag is letters, digits, '_', '.' and '-', after a "
                "letter, digit or '_'); a value set with --set or an inventory var ends up here"
            )
        return value

    @field_validator("cuda_archs", "cuda_base", mode="before")
    @classmethod
    def _unset(cls, value: Any) -> Any:
        return None if isinstance(value, str) and value.strip() in ("", "None") else value

    @field_validator("cuda_archs")
    @classmethod
    def _archs(cls, value: str | None) -> str | None:
        return value if value is None else " ".join(str(a) for a in cuda.parse_archs(value))

    @field_validator("cuda_base")
    @classmethod
    def _base(cls, value: str | None, info: ValidationInfo) -> str | None:
        archs = info.data.get("cuda_archs")
        if value is None:
            return None
        if not IMAGE_REFERENCE.match(value):
            raise ValueError(f"{value!r} is not a Docker image name with an optional tag")
        if archs is None:
            raise ValueError("a CUDA base without build.cuda_archs: set both, or neither")
        problem = cuda.refusal(value, cuda.parse_archs(archs))
        if problem:
            raise ValueError(problem)
        return value

    @field_validator("args")
    @classmethod
    def _cuda_args(cls, value: dict[str, str], info: ValidationInfo) -> dict[str, str]:
        """CUDA_ARCHS and CUDA_BASE come from cuda_archs and cuda_base where those are set;
        given only as build arguments (a playbook from an earlier release), they are checked
        against each other all the same."""
        named = sorted({"CUDA_ARCHS", "CUDA_BASE"} & set(value))
        if named and info.data.get("cuda_archs") is not None:
            raise ValueError(f"{' and '.join(named)} come from build.cuda_archs and "
                             "build.cuda_base: remove them from build.args")
        if value.get("CUDA_ARCHS") and value.get("CUDA_BASE"):
            problem = cuda.refusal(value["CUDA_BASE"], cuda.parse_archs(value["CUDA_ARCHS"]))
            if problem:
                raise ValueError(f"CUDA_BASE: {problem}")
        return value

    def build_args(self) -> dict[str, str]:
        """The build arguments docker gets: `args`, plus CUDA_ARCHS and CUDA_BASE (the one
        set, or the one picked for the architectures) when cuda_archs is set."""
        out = {k: str(v) for k, v in (self.args or {}).items()}
        if self.cuda_archs is not None:
            archs = cuda.parse_archs(self.cuda_archs)
            out["CUDA_ARCHS"] = self.cuda_archs
            out["CUDA_BASE"] = self.cuda_base or cuda.pick_base(archs)
        return out


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
    listen: GrpcListen = Field(
        default="127.0.0.1:9820", description="gRPC address ([daemon] listen): IP:PORT."
    )
    status_listen: Listen = Field(
        default="127.0.0.1:9821", description="HTTP status address ([daemon] status_listen)."
    )
    total_budget: str = Field(
        default="cgroup",
        description='Memory budget: "cgroup" (the container\'s cgroup limit minus '
        "safety_margin, never the host's RAM; a host that shows no cgroup limit is refused at "
        "preflight) or a size such as 400GiB (whole GiB, MiB, GB, MB or bytes: the forms cuzk "
        "reads), which must fit under the limit minus safety_margin where there is one.",
    )
    safety_margin: CuzkSize = Field(
        default="5GiB",
        description="Memory kept free under the limit ([memory] safety_margin; cuzk's "
        "default). Whole GiB, MiB, GB, MB or bytes.",
    )
    param_cache: RemotePath = Field(
        default="/data/zk/params", description="[srs] param_cache (writable)."
    )
    gpu_devices: list[Annotated[int, Field(ge=0)]] = Field(
        default_factory=list,
        description="[gpus] devices: GPU ordinals (usually from a host var); []: every GPU "
        "nvidia-smi lists.",
    )
    gpu_threads: int = Field(
        default=0,
        ge=0,
        description="[gpus] gpu_threads (usually from a host var); 0: cuzk's default.",
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
        return value if value == "cgroup" else _check_cuzk_size(value)


class ParamFile(Section):
    """One file the proof type reads from param_cache."""

    name: str = Field(
        pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]*$", description="File name in param_cache."
    )
    cid: str | None = Field(
        default=None,
        pattern=r"^(Qm[1-9A-HJ-NP-Za-km-z]{44}|b[a-z2-7]{20,120})$",
        description="Its IPFS CID: hosts download it by CID from params.gateway; "
        "null: it cannot be downloaded (only pushed from params.source).",
    )
    digest: str | None = Field(
        default=None,
        pattern=r"^[0-9a-f]{32}$",
        description="filecoin-proofs' digest: the hex of the first 16 bytes of the file's "
        "blake2b-512 sum (parameters.json's `digest`), checked wherever the file is.",
    )
    size: int | None = Field(
        default=None, ge=1, description="Expected size in bytes; null: present and not empty."
    )
    sha256: str | None = Field(
        default=None,
        pattern=r"^[0-9a-fA-F]{64}$",
        description="Expected sha256 (for files of your own without a digest); null: not "
        "checked.",
    )


CURIO_GATEWAY = "https://pub-08ae819c828244bdbe5f615fd8c5e144.r2.dev/ipfs/"
"""curio's own params mirror, its fetcher's default since December 2024 (curio commit
7cc12141, "Use curio-specific param mirror"; lib/fastparamfetch/paramfetch.go `gateway` at
e0294b0f). Like IPFS_GATEWAY, which overrides it there, the CID is appended as it is."""
MAX_URL = 2048
_URL = re.compile(r"https?://(\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9]([A-Za-z0-9.-]*[A-Za-z0-9])?)"
                  r"(:[0-9]{1,5})?(/[\w%+=:,./-]*)?", re.ASCII)


def url_problem(text: object) -> str | None:
    """Why `text` is not a download URL rollout uses (None: it is): an http or https URL of
    at most MAX_URL characters: a host name or address, an optional port, then a path made
    only of the characters a shell reads as plain text (ASCII letters, digits, _%+=:,./-).
    No credentials, query or fragment: nothing in it is ever shell text or an option."""
    if not isinstance(text, str):
        return "not a string"
    if len(text) > MAX_URL:
        return f"{len(text)} characters, at most {MAX_URL}"
    if not _URL.fullmatch(text):
        return ("not an http(s) URL of a host, an optional port and a path of letters, "
                "digits and _%+=:,./- (no credentials, query or fragment)")
    return None


def _check_gateway(text: str | None) -> str | None:
    """A base URL without its trailing /; None for null or "" (`--set params_gateway=`)."""
    if not text:
        return None
    problem = url_problem(text)
    if problem:
        raise ValueError(f"params.gateway {ascii(text)[:200]}: {problem}")
    return text.rstrip("/")


def _check_push_source(text: str | None) -> str | None:
    if text is not None and re.match(r"^https?://", text):
        raise ValueError(
            "params.source is a folder on this machine to push from; a mirror that serves "
            f"the files by CID goes in params.gateway, got {text!r}"
        )
    return text


class ParamsSpec(Section):
    """The proof parameters (.params, .vk) cuzk reads from [srs] param_cache at its first
    proof. Preflight checks them before the old daemon is touched: a file already on the
    host (in param_cache or a `reuse` folder) is verified in place; a missing one is
    downloaded by the host from `gateway` by its CID, or pushed from `source` when set."""

    files: list[ParamFile] = Field(
        default_factory=list,
        description="The files the validation's proof needs; null: the files of "
        "validate.proof_kind (resources/params/kinds.yaml), with their CIDs and digests from "
        "filecoin-proofs' parameters.json.",
    )
    gateway: Annotated[str | None, AfterValidator(_check_gateway)] = Field(
        default=None,
        description="Where hosts download a missing file: `<gateway>/ipfs/<cid>`, an IPFS "
        "gateway or a mirror serving the files by CID; set, it wins over IPFS_GATEWAY. null: "
        "as curio's fetcher, the host's IPFS_GATEWAY (in the environment of rollout's SSH "
        "session there; the CID appended to it as it is, so it ends with /), else curio's "
        f"own mirror, {CURIO_GATEWAY}<cid>. Resumable, size and digest checked on the host.",
    )
    reuse: list[RemotePath] = Field(
        default_factory=lambda: ["/var/tmp/filecoin-proof-parameters"],
        description="Folders on the host whose verified files are used in place (linked from "
        "param_cache, never copied): curio's cache by default; the host's "
        "FIL_PROOFS_PARAMETER_CACHE is looked in too.",
    )
    source: Annotated[Source, AfterValidator(_check_push_source)] = Field(
        default=None,
        description="Opt-in: a folder on this machine (relative to the playbook file) whose "
        "files are pushed to hosts that lack them, each hashed once per run, instead of "
        "the hosts downloading them. null: never pushed.",
    )
    pce_bytes: Size = Field(
        default="0",
        description="Size of the PCE file cuzk writes at its first proof. cuzk writes it anew "
        "in every lifetime, through <name>.tmp beside the old one: preflight wants the larger "
        "of this and the existing file's size free in param_cache. null or absent: "
        "validate.proof_kind's figure (26GiB for porep-32g; resources/params/kinds.yaml), "
        "else 0. 0: not checked.",
    )
    pce_file: str = Field(
        default="pce-porep-32g.bin",
        pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]*$",
        description="Name of that PCE file in param_cache. null or absent: "
        "validate.proof_kind's (cuzk's pce-<circuit>.bin), else pce-porep-32g.bin.",
    )


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
        "empty) and that on each the driver runs the release's CUDA build (its manifest's "
        "CUDA_BASE), the build has code for the GPU (CUDA_ARCHS) and the free memory holds "
        "validate.proof_kind's need (docs/real-fleet.md, section 4). Usually a host var: "
        "false on hosts without GPUs, like the lab's.",
    )
    host_marker: RemotePath | None = Field(
        default=None,
        description="A file every host of this playbook must have, else preflight refuses it "
        "(the lab playbook names the one `lab.up` writes); null: no such check.",
    )
    min_budget: Size = Field(
        default="0",
        description="A least memory budget of your own: a smaller budget is refused at "
        "preflight, naming both numbers. validate.proof_kind gives cuzk's own figure.",
    )
    c1_miner: bool = Field(
        default=True,
        description="Compare the C1's replica id with the one of validate's --miner-id and "
        "--sector-num (rollout's reading of filecoin-proofs' replica-id derivation). false: "
        "that comparison alone is off; the C1's sector number and proof kind are still "
        "checked.",
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

    proof_kind: str | None = Field(
        default=None,
        description="The validation proof's kind, and of the work the host does (resources/"
        "params/kinds.yaml: " + ", ".join(kinds()) + ", the kinds cuzk proves): params.files "
        "defaults to its files, preflight refuses a budget with which cuzk never proves it "
        "(its memory model: porep-32g needs 72 GiB, SRS + PCE extraction + one partition) "
        "and warns where it never caches its PCE (porep-32g under 84 GiB), and refuses a C1 "
        "of another kind; a cuzk-bench command's -t must be its. null: none of these.",
    )
    command: CommandField = Field(
        default_factory=lambda: [
            "{{ release_dir }}/cuzk-bench", "-a", "http://{{ daemon.listen }}", "single", "-t",
            "porep", "--c1", "{{ validate.input.path }}"],
        description="Command run on the host (runtime template: `release_dir`, `host`, ...)."
        + COMMAND_HELP,
    )
    env: dict[EnvName, str] = Field(default_factory=dict, description=ENV_HELP)
    success_pattern: Regex = Field(
        default=r"^status:\s+COMPLETED",
        description="Regex (multiline) a line of the result block must match. "
        "A proof passes only when the bench's stdout has exactly one `=== Proof Result ===` "
        "block (up to a blank line) with exactly one `status:` line, COMPLETED, no "
        "`status: FAILED` line anywhere, and this pattern matching inside that block; the "
        "exit code and stderr never make a success (docs/daemon.md)."
    )
    timeout: Seconds = Field(
        default=600,
        gt=0,
        description="Seconds the command may run (cuzk-bench has no timeout of its own; a "
        "budget too small for the proof blocks it forever). Still running then: killed, "
        "reported as hung with the daemon's /status counters before and after, and the "
        "host is rolled back.",
    )
    budget_wait: Seconds = Field(
        default=120,
        ge=0,
        description="Seconds the validation proof's job may wait for cuzk's memory budget "
        "(/status: its partitions pending, the budget's free bytes below one partition of "
        "validate.proof_kind) while other work holds the budget; then it is stopped as on "
        "timeout and the validation fails naming the budget, what one proof needs and who "
        "holds it. Where nothing could release budget: at once. Only kinds with a partition "
        "figure are watched. The watch follows the validation's own job by its id: cuzk-bench "
        "`single` names it with a fresh UUID (it takes no id from the caller) and curio names "
        "its jobs `porep-<miner>-<sector>` and so on, so it is the job of that form that "
        "appeared after the proof was submitted, never merely the oldest new one. Where "
        "another cuzk-bench submits at the same moment, the proof is stopped only once each "
        "such job waits. A client that names its own jobs is not watched (validate.timeout "
        "bounds it).",
    )
    input: InputSpec = Field(default_factory=InputSpec, description="The proof's input file.")

    @field_validator("proof_kind")
    @classmethod
    def _known_kind(cls, value: str | None) -> str | None:
        if value == "":
            return None
        if value is not None and value not in kinds():
            raise ValueError(f"unknown proof kind {value!r}; known: {', '.join(kinds())} "
                             "(the kinds cuzk proves: 32 GiB sectors only)")
        return value

    @field_validator("command")
    @classmethod
    def _proves_the_kind(cls, value: CommandField, info: ValidationInfo) -> CommandField:
        name = info.data.get("proof_kind")
        asked = bench_type_asked(value)
        if name is None or asked is None or "{" in asked:
            return value
        if asked != kind(name).bench_type:
            raise ValueError(
                f"the command proves cuzk-bench -t {asked}, but validate.proof_kind is "
                f"{name} (-t {kind(name).bench_type}): set one to match the other")
        return value


class Retired(BaseModel):
    """A playbook key that a release renamed or removed: a playbook that still has it loads,
    with a warning naming what replaced it."""

    model_config = ConfigDict(frozen=True)

    key: str = Field(description="Its dotted key, like `daemon.drain.memory_threshold`.")
    replaced_by: str | None = Field(
        default=None,
        description="A renamed key with the same meaning: the value moves there (unless the "
        "playbook sets that key too). None: removed, the value is ignored.",
    )
    why: str = Field(description="What does its job now, for the warning.")


RETIRED_KEYS: tuple[Retired, ...] = (
    Retired(
        key="daemon.drain.memory_threshold",
        why="the drain now waits until the headroom under the limit fits the new daemon's "
        "budget (daemon.total_budget) or the working set is back to its baseline; "
        "daemon.drain.plateau fails a drain whose memory stops falling",
    ),
    Retired(
        key="daemon.drain.poll_interval",
        why="the drain samples memory on the host at a fixed rate; daemon.drain.deadline and "
        "daemon.drain.plateau bound it",
    ),
    Retired(
        key="daemon.log_file",
        why="the supervisor writes the daemon's output to rollout/daemon.log under "
        "release.root",
    ),
    Retired(
        key="daemon.log_level",
        why="rollout no longer passes --log-level to the daemon; set its logging in its "
        "config (daemon.extra_config) or with the supervise step's launcher",
    ),
    Retired(
        key="validate.failure_pattern",
        why="success is validate.success_pattern matching the output; anything else fails",
    ),
    Retired(
        key="work.settle",
        why="after the cordon the stop waits work.cordon_takes (the scheduler's poll "
        "interval, curio's 30 s by default) and for every job that appeared meanwhile; set "
        "work.cordon_takes if your scheduler polls at another interval",
    ),
)
"""Retired playbook keys, declared once next to the options: a playbook from an earlier
release loads with a warning (a renamed key keeps its meaning for at least one release)."""
