"""The lab's images: a debootstrapped Debian base (cached by content) and the host image.

No registry is ever contacted: the base is built with debootstrap from the mirror in this
machine's own apt configuration and `docker import`ed; the host image is built FROM it.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

import docker
from docker.errors import BuildError, ImageNotFound

from rollout.errors import EnvironmentProblem
from rollout.lab.apt import ensure_command

BASE_REPO = "rollout-lab/base"
HOST_REPO = "rollout-lab/host"
PROVER_REPO = "rollout-lab/prover"
PACKAGES = ("openssh-server", "procps", "curl", "python3", "iproute2", "ca-certificates")
HOST_DOCKERFILE = "lab-host.Dockerfile"
PROVER_DOCKERFILE = "lab-prover.Dockerfile"
HOST_FILES = ("lab-standin/lab-late-reaper", "lab-standin/lab-init", "lab-standin/curio",
              "lab-standin/nvidia-smi")
TRIM_PATHS = (
    "usr/share/doc", "usr/share/man", "usr/share/info", "usr/share/locale",
    "var/cache/apt/archives", "var/lib/apt/lists", "var/log/apt", "var/cache/debconf",
)  # fmt: skip
APT_SOURCES = (Path("/etc/apt/sources.list.d/debian.sources"), Path("/etc/apt/sources.list"))


def dockerfiles_dir() -> Path:
    """The build context shared by every lab Dockerfile."""
    return Path(__file__).resolve().parent.parent / "resources" / "dockerfiles"


def cache_dir() -> Path:
    xdg = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(xdg) / "rollout-lab"


@dataclass(frozen=True)
class Mirror:
    url: str
    suite: str


def _parse_deb822(text: str) -> Mirror | None:
    uris = re.search(r"^URIs:\s*(\S+)", text, re.MULTILINE)
    suites = re.search(r"^Suites:\s*(\S+)", text, re.MULTILINE)
    if uris and suites:
        return Mirror(uris.group(1), suites.group(1))
    return None


def _parse_one_line(text: str) -> Mirror | None:
    found = re.search(r"^deb\s+(?:\[[^\]]*\]\s+)?(\S+)\s+(\S+)", text, re.MULTILINE)
    return Mirror(found.group(1), found.group(2)) if found else None


def apt_mirror() -> Mirror:
    """The first Debian mirror and suite this machine's apt is configured with."""
    for path in APT_SOURCES:
        if not path.is_file():
            continue
        text = path.read_text()
        parsed = _parse_deb822(text) if path.suffix == ".sources" else _parse_one_line(text)
        if parsed:
            return parsed
    raise EnvironmentProblem(
        "no Debian mirror found in " + " or ".join(str(p) for p in APT_SOURCES)
    )


def base_hash(mirror: Mirror) -> str:
    """Content hash of everything the base image is made from."""
    digest = hashlib.sha256()
    for part in (mirror.suite, ",".join(PACKAGES), mirror.url):
        digest.update(part.encode() + b"\0")
    digest.update((dockerfiles_dir() / HOST_DOCKERFILE).read_bytes())
    return digest.hexdigest()[:16]


def _tarball_key(mirror: Mirror) -> str:
    digest = hashlib.sha256(f"{mirror.suite}\0{','.join(PACKAGES)}\0{mirror.url}".encode())
    return digest.hexdigest()[:16]


def _run(argv: list[str], what: str) -> None:
    done = subprocess.run(argv, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        tail = "\n".join((done.stderr or done.stdout).strip().splitlines()[-10:])
        raise EnvironmentProblem(f"{what} failed (exit {done.returncode}): {tail}")


def _debootstrap(mirror: Mirror, tarball: Path) -> None:
    if os.geteuid() != 0:
        raise EnvironmentProblem("building the lab base image needs root (debootstrap)")
    ensure_command("debootstrap", "debootstrap")
    tarball.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=tarball.parent, prefix="rootfs-") as tmp:
        root = Path(tmp) / "root"
        _run(
            ["debootstrap", "--variant=minbase", f"--include={','.join(PACKAGES)}",
             mirror.suite, str(root), mirror.url],
            "debootstrap",
        )  # fmt: skip
        for rel in TRIM_PATHS:
            shutil.rmtree(root / rel, ignore_errors=True)
        for key in (root / "etc/ssh").glob("ssh_host_*"):
            key.unlink()
        partial = tarball.with_suffix(".partial")
        _run(["tar", "--numeric-owner", "-C", str(root), "-cf", str(partial), "."], "tar")
        partial.rename(tarball)


def ensure_base_image(client: docker.DockerClient) -> str:
    """Return the tag of the cached base image, building it on first use."""
    mirror = apt_mirror()
    tag = f"{BASE_REPO}:{base_hash(mirror)}"
    try:
        image = client.images.get(tag)
    except ImageNotFound:
        tarball = cache_dir() / f"debootstrap-{mirror.suite}-{_tarball_key(mirror)}.tar"
        if not tarball.is_file():
            _debootstrap(mirror, tarball)
        repo, _, version = tag.partition(":")
        client.api.import_image_from_file(
            str(tarball), repository=repo, tag=version,
            changes=['CMD ["/bin/bash"]', "ENV LANG=C.UTF-8"],
        )  # fmt: skip
        image = client.images.get(tag)
    image.tag(BASE_REPO, "latest")
    return tag


def _host_hash(base_tag: str) -> str:
    digest = hashlib.sha256(base_tag.encode())
    for rel in (HOST_DOCKERFILE, *HOST_FILES):
        digest.update((dockerfiles_dir() / rel).read_bytes())
    return digest.hexdigest()[:16]


def build_image(
    client: docker.DockerClient, dockerfile: str, tag: str, buildargs: dict[str, str]
) -> str:
    """Build one of the lab Dockerfiles with the dockerfiles/ folder as context."""
    try:
        client.images.build(
            path=str(dockerfiles_dir()), dockerfile=dockerfile, tag=tag,
            buildargs=buildargs, rm=True, forcerm=True,
        )  # fmt: skip
    except BuildError as exc:
        lines = [str(step.get("stream", step.get("error", ""))).strip() for step in exc.build_log]
        tail = "\n".join(line for line in lines if line)[-2000:]
        raise EnvironmentProblem(f"building {tag} from {dockerfile} failed: {tail}") from exc
    return tag


def ensure_host_image(client: docker.DockerClient) -> str:
    """Return the tag of the lab host image (sshd, late reaper, /data) FROM the base."""
    base_tag = ensure_base_image(client)
    tag = f"{HOST_REPO}:{_host_hash(base_tag)}"
    try:
        client.images.get(tag)
    except ImageNotFound:
        build_image(client, HOST_DOCKERFILE, tag, {"BASE": base_tag})
    return tag


def build_prover_image(
    client: docker.DockerClient, tag: str, version: str, fault: str = "none"
) -> str:
    """Build the stand-in cuzk prover image; its executables carry VERSION and FAULT."""
    base_tag = ensure_base_image(client)
    args = {"BASE": base_tag, "VERSION": version, "FAULT": fault}
    return build_image(client, PROVER_DOCKERFILE, tag, args)
