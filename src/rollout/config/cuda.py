"""Which CUDA base can build which GPU architecture: one small table (data), and the two
questions the build settings ask of it (the base to pick, a base that cannot build)."""

from __future__ import annotations

import re
from dataclasses import dataclass


@dataclass(frozen=True)
class Arch:
    """An nvcc target (`sm_XX` without the `sm_`) and the CUDA releases whose nvcc builds it."""

    arch: int
    family: str
    first: tuple[int, int]  # the first CUDA release whose nvcc has sm_XX
    last: tuple[int, int] | None = None  # the last one, where a later CUDA dropped it
    driver: tuple[int, ...] = ()  # the first Linux driver that runs this family, where
    # that is above every CUDA floor of DRIVER_FLOORS


ARCHS: tuple[Arch, ...] = (
    Arch(60, "Pascal: P100", (8, 0), last=(12, 9)),
    Arch(61, "Pascal: GTX 10xx, P4, P40", (8, 0), last=(12, 9)),
    Arch(70, "Volta: V100", (9, 0), last=(12, 9)),
    Arch(75, "Turing: RTX 20xx, T4", (10, 0)),
    Arch(80, "Ampere: A100, A30", (11, 0)),
    Arch(86, "Ampere: RTX 30xx, A40, RTX A4000-A6000", (11, 1)),
    Arch(89, "Ada: RTX 40xx, L4, L40, RTX 4000-6000 Ada", (11, 8)),
    Arch(90, "Hopper: H100, H200", (11, 8)),
    Arch(100, "Blackwell: B200, GB200", (12, 8), driver=(570, 26)),
    Arch(120, "Blackwell: RTX 50xx, RTX PRO 4000-6000 Blackwell", (12, 8), driver=(570, 26)),
)
"""Per GPU family, the CUDA releases whose nvcc targets it (NVIDIA's CUDA release notes;
CUDA 13.0 dropped Pascal and Volta), and for Blackwell the first driver that runs it at all:
R570, the driver of CUDA 12.8 GA, the first CUDA with Blackwell (CUDA 12.8 release notes,
"CUDA Toolkit and Corresponding Driver Versions": >= 570.26). docs/real-fleet.md shows the
same table."""

DRIVER_FLOORS: dict[int, tuple[int, ...]] = {11: (450, 80, 2), 12: (525, 60, 13), 13: (580,)}
"""Per CUDA major release, the least Linux driver that runs a build of any of its minor
releases (minor version compatibility: NVIDIA's "CUDA Compatibility" guide, table "CUDA
Toolkit 11.x, 12.x, and 13.x Driver Version Ranges", and the CUDA Toolkit release notes'
"minimum required driver version for CUDA minor version compatibility"). Newer drivers run
older builds (backward compatibility), so a floor is all there is."""

BASES: tuple[str, ...] = (
    "nvidia/cuda:12.6.3-devel-ubuntu22.04",
    "nvidia/cuda:12.8.1-devel-ubuntu22.04",
)
"""The CUDA devel images rollout picks from, oldest first: the first that builds every
architecture asked for (all on Ubuntu 22.04, so the runtime stage's glibc stays 2.35)."""

_ARCH_WORD = re.compile(r"^(?:sm_|compute_)?(\d{2,3})([af]?)$")
_VERSION = re.compile(r"^(?:cuda-?)?(\d+)\.(\d+)(?:[.-]|$)")


def parse_archs(text: str) -> list[int]:
    """`"86 89 120"` (also `sm_120`, `90a`) -> [86, 89, 120]; an unknown one is an error."""
    known = {a.arch for a in ARCHS}
    out = []
    for word in text.replace(",", " ").split():
        match = _ARCH_WORD.match(word)
        if match is None or int(match.group(1)) not in known:
            raise ValueError(
                f"{word!r} is not a GPU architecture rollout knows; known: "
                f"{' '.join(str(a) for a in sorted(known))} (sm_XX without the sm_)"
            )
        out.append(int(match.group(1)))
    if not out:
        raise ValueError("names no GPU architecture (like \"89\" or \"86 89 120\")")
    return out


def base_version(image: str) -> tuple[int, int] | None:
    """The CUDA release an image's tag names (`nvidia/cuda:12.8.1-devel-ubuntu22.04` ->
    (12, 8)); None when its tag does not start with one."""
    last = image.rsplit("/", 1)[-1]
    if ":" not in last:
        return None
    match = _VERSION.match(last.rsplit(":", 1)[1])
    return (int(match.group(1)), int(match.group(2))) if match else None


def unbuildable(version: tuple[int, int], archs: list[int]) -> list[Arch]:
    """The architectures asked for that this CUDA release's nvcc cannot build."""
    table = {a.arch: a for a in ARCHS}
    return [table[n] for n in archs if not _builds(version, table[n])]


def _builds(version: tuple[int, int], arch: Arch) -> bool:
    return arch.first <= version and (arch.last is None or version <= arch.last)


def refusal(image: str, archs: list[int]) -> str | None:
    """Why `image` cannot build `archs`, or None (also when its tag names no version: the
    image's own nvcc check in the Dockerfile then decides, at the build's first step)."""
    version = base_version(image)
    if version is None:
        return None
    bad = unbuildable(version, archs)
    if not bad:
        return None
    said = "; ".join(f"sm_{a.arch} ({a.family}), which needs CUDA {_span(a)}" for a in bad)
    return (f"CUDA {version[0]}.{version[1]} ({image}) cannot build {said}: set a base "
            "that can, or leave it unset (null) to have rollout pick one")


def _span(a: Arch) -> str:
    first = f"{a.first[0]}.{a.first[1]}"
    return f"{first} to {a.last[0]}.{a.last[1]}" if a.last else f"{first} or newer"


def pick_base(archs: list[int]) -> str:
    """The oldest of BASES that builds every architecture asked for."""
    for image in BASES:
        version = base_version(image)
        if version is not None and not unbuildable(version, archs):
            return image
    raise ValueError(f"no CUDA base rollout knows builds all of {archs}: set build.cuda_base")


def driver_text(version: tuple[int, ...]) -> str:
    """(570, 124, 6) -> "570.124.06", as NVIDIA writes its drivers."""
    return ".".join([str(version[0]), *(f"{p:02d}" for p in version[1:])])


def family_of(cc: int) -> Arch | None:
    """The family of a GPU of compute capability `cc` (89 for 8.9): the newest Arch of its
    major version at or below it."""
    same = [a for a in ARCHS if a.arch // 10 == cc // 10 and a.arch <= cc]
    return max(same, key=lambda a: a.arch) if same else None


def driver_needed(cuda: tuple[int, int], cc: int | None) -> tuple[int, ...] | None:
    """The least driver that runs a CUDA `cuda` build on a GPU of compute capability `cc`
    (None: not known); None where rollout knows no floor for that CUDA release."""
    floor = DRIVER_FLOORS.get(cuda[0])
    if floor is None:
        return None
    family = family_of(cc) if cc is not None else None
    return max(floor, family.driver) if family is not None else floor


def runs_on(archs: list[int], cc: int) -> bool:
    """Whether a build with code for `archs` (sm_XX) has a kernel a GPU of compute
    capability `cc` runs: code for sm_X.Y runs on X.Z where Z >= Y (NVIDIA's binary
    compatibility, CUDA C++ Programming Guide); none runs across a major version."""
    return any(a // 10 == cc // 10 and a % 10 <= cc % 10 for a in archs)
