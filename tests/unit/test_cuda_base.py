"""The CUDA base follows the GPU architectures asked for; a base that cannot build one of
them is refused at load, naming the file, line and key."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from rollout.config import cuda
from rollout.config.playbook import DEFAULT_PLAYBOOK
from rollout.errors import ConfigError
from rollout.steps.kinds import load_playbook

REPO = Path(__file__).resolve().parents[2]


def load(tmp_path: Path, **overrides: str) -> dict[str, str]:
    playbook = load_playbook(overrides={"curio_dir": str(tmp_path), **overrides})
    return playbook.build.build_args()


@pytest.mark.parametrize(("archs", "base"), [
    ("89", "nvidia/cuda:12.6.3-devel-ubuntu22.04"),
    ("75 80 86 89 90", "nvidia/cuda:12.6.3-devel-ubuntu22.04"),
    ("120", "nvidia/cuda:12.8.1-devel-ubuntu22.04"),
    ("86 89 120", "nvidia/cuda:12.8.1-devel-ubuntu22.04"),
    ("sm_100", "nvidia/cuda:12.8.1-devel-ubuntu22.04"),
])
def test_the_base_is_picked_from_the_architectures(tmp_path: Path, archs: str, base: str) -> None:
    args = load(tmp_path, cuda_archs=archs)
    assert args["CUDA_BASE"] == base
    assert args["CUDA_ARCHS"] == " ".join(re.findall(r"\d+", archs))


def test_an_explicit_base_that_can_build_them_is_kept(tmp_path: Path) -> None:
    image = "nvidia/cuda:12.9.1-devel-ubuntu22.04"
    assert load(tmp_path, cuda_archs="120", cuda_base=image)["CUDA_BASE"] == image
    own = "registry.example:5000/team/cuda-devel:latest"  # no version in its tag
    assert load(tmp_path, cuda_archs="120", cuda_base=own)["CUDA_BASE"] == own


@pytest.mark.parametrize(("archs", "base", "said"), [
    ("120", "nvidia/cuda:12.6.3-devel-ubuntu22.04", "sm_120 (Blackwell: RTX 50xx"),
    ("86 100", "nvidia/cuda:12.4.1-devel-ubuntu22.04", "sm_100"),
    ("61", "nvidia/cuda:13.0.0-devel-ubuntu24.04", "needs CUDA 8.0 to 12.9"),
])
def test_a_base_that_cannot_build_an_arch_is_refused_at_load(
    tmp_path: Path, archs: str, base: str, said: str
) -> None:
    with pytest.raises(ConfigError) as caught:
        load(tmp_path, cuda_archs=archs, cuda_base=base)
    message = str(caught.value)
    assert re.match(r"^\S*rollout\.yaml:\d+: build\.cuda_base: ", message), message
    assert said in message and base in message
    assert caught.value.exit_code == 2


@pytest.mark.parametrize("archs", ["89; rm -rf /", "$(id)", "1200", "", "sm_89 *"])
def test_an_architecture_that_is_not_one_is_refused(tmp_path: Path, archs: str) -> None:
    if not archs:  # empty means unset: no CUDA build at all
        assert "CUDA_ARCHS" not in load(tmp_path, cuda_archs=archs)
        return
    with pytest.raises(ConfigError, match=r"build\.cuda_archs: "):
        load(tmp_path, cuda_archs=archs)


def test_old_style_build_args_are_checked_too(tmp_path: Path) -> None:
    playbook = tmp_path / "old.yaml"
    dockerfile = REPO / "dockerfiles" / "cuzk.Dockerfile"
    playbook.write_text(
        "build:\n"
        f"  dockerfile: {dockerfile}\n"
        f"  context: {tmp_path}\n"
        "  args:\n"
        "    CUDA_BASE: nvidia/cuda:12.6.3-devel-ubuntu22.04\n"
        "    CUDA_ARCHS: \"89 120\"\n"
        "  image_paths: {cuzk-daemon: /usr/local/bin/cuzk-daemon}\n"
        "release: {executables: [cuzk-daemon]}\n"
        "steps: [{name: build, kind: build}]\n"
    )
    with pytest.raises(ConfigError, match=r"old\.yaml:4: build\.args: .*cannot build sm_120"):
        load_playbook(playbook)


def test_cuda_args_beside_cuda_archs_are_refused(tmp_path: Path) -> None:
    extra = "    CUDA_BASE: nvidia/cuda:12.8.1-devel-ubuntu22.04\n"
    playbook = (REPO / "playbooks" / "rollout.yaml").read_text().replace(
        "    RUNTIME_BASE:", extra + "    RUNTIME_BASE:")
    path = tmp_path / "p.yaml"
    path.write_text(playbook.replace("../dockerfiles", str(REPO / "dockerfiles")))
    with pytest.raises(ConfigError, match=r"CUDA_BASE come from build.cuda_archs"):
        load_playbook(path, overrides={"curio_dir": str(tmp_path)})


def test_the_dockerfiles_default_base_is_the_one_picked_for_its_default_arch() -> None:
    text = (DEFAULT_PLAYBOOK.parent.parent / "dockerfiles" / "cuzk.Dockerfile").read_text()
    base = re.search(r"^ARG CUDA_BASE=(\S+)$", text, re.MULTILINE)
    arch = re.search(r'^ARG CUDA_ARCHS="([^"]+)"$', text, re.MULTILINE)
    assert base and arch
    assert cuda.pick_base(cuda.parse_archs(arch.group(1))) == base.group(1)
    assert "nvcc --list-gpu-arch" in text  # a hand build with a base too old fails early


def test_the_docs_table_says_what_the_data_says() -> None:
    text = (REPO / "docs" / "real-fleet.md").read_text()
    for a in cuda.ARCHS:
        row = f"| `{a.arch}` | {a.family} | {a.first[0]}.{a.first[1]}"
        assert row in text, row
    assert "12.6 has no sm_120" in text or "no sm_120" in text


def test_each_known_arch_has_a_base_and_the_table_is_consistent() -> None:
    for a in cuda.ARCHS:
        image = cuda.pick_base([a.arch])
        version = cuda.base_version(image)
        assert version is not None and cuda.unbuildable(version, [a.arch]) == []
    assert cuda.base_version("nvidia/cuda:12.8.1-devel-ubuntu22.04") == (12, 8)
    assert cuda.base_version("nvidia/cuda") is None
    assert cuda.base_version("localhost:5000/cuda") is None  # a port is not a tag
