"""The real cuzk playbook is the default; the lab's stand-in playbook only comes with the lab's
inventory; the real Dockerfile parses and installs where the playbook looks."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from rollout.commands.app import load_fleet
from rollout.config.playbook import DEFAULT_PLAYBOOK, LAB_PLAYBOOK
from rollout.errors import ConfigError
from rollout.lab.fleet import HOST_MARKER, LabHost, inventory_text
from rollout.steps.kinds import load_playbook

INSTRUCTIONS = {
    "FROM", "ARG", "ENV", "RUN", "COPY", "ADD", "WORKDIR", "CMD", "ENTRYPOINT", "LABEL",
    "USER", "EXPOSE", "VOLUME", "SHELL", "STOPSIGNAL", "HEALTHCHECK", "ONBUILD",
}  # fmt: skip
USER_INVENTORY = """\
defaults: {user: root, known_hosts: known_hosts}
hosts:
  - {name: prod-1, address: 127.0.0.1, port: 40613, vars: {gpus: [0, 1], gpu_threads: 8}}
"""


def instructions(path: Path) -> list[tuple[str, str]]:
    """A Dockerfile's instructions (continuations joined, comments dropped); raises on a
    line that is not one, the way `docker build` would refuse the file."""
    logical: list[str] = []
    pending = ""
    for raw in path.read_text().splitlines():
        line = raw.strip()
        if not pending and (not line or line.startswith("#")):
            continue
        if pending and line.startswith("#"):
            continue
        pending += line[:-1] + " " if line.endswith("\\") else line
        if not line.endswith("\\"):
            logical.append(pending)
            pending = ""
    assert not pending, f"{path}: a continuation runs off the end"
    out = []
    for text in logical:
        word, _, rest = text.partition(" ")
        assert word.upper() in INSTRUCTIONS and word == word.upper(), f"not an instruction: {text}"
        out.append((word, rest.strip()))
    return out


def test_real_dockerfile_parses_and_builds_what_cuzk_needs() -> None:
    steps = instructions(DEFAULT_PLAYBOOK.parent.parent / "dockerfiles" / "cuzk.Dockerfile")
    stages = [rest.split(" AS ")[-1] for word, rest in steps if word == "FROM"]
    assert stages == ["build", "runtime"]  # a build stage, then the slim one
    header_args = [rest for word, rest in steps[: [w for w, _ in steps].index("FROM")]]
    assert any(a.startswith("CUDA_BASE=nvidia/cuda:12") and "devel" in a for a in header_args)
    runs = " ".join(rest for word, rest in steps if word == "RUN")
    assert "protobuf-compiler" in runs  # tonic-build in cuzk-proto's build.rs
    assert "cargo build --release --locked -p cuzk-daemon -p cuzk-bench" in runs
    assert "rust-toolchain.toml" in runs and "ldd" in runs and "not found" in runs
    copies = [rest for word, rest in steps if word == "COPY" and "--from" not in rest]
    assert {c.split()[0] for c in copies} == {
        "extern/cuzk", "extern/bellperson", "extern/bellpepper-core", "extern/supraseal-c2"}
    assert any("CUDA_ARCHS" in rest for word, rest in steps if word == "ARG")


def test_default_playbook_image_paths_are_where_the_dockerfile_installs(tmp_path: Path) -> None:
    playbook = load_playbook(overrides={"curio_dir": str(tmp_path)})
    steps = instructions(playbook.build.dockerfile)
    final = steps[max(i for i, (word, _) in enumerate(steps) if word == "FROM"):]
    installed = set()
    for word, rest in final:
        if word == "COPY" and rest.startswith("--from=build"):
            *sources, dest = rest.split()[1:]
            installed |= {dest.rstrip("/") + "/" + Path(s).name for s in sources}
    assert set(playbook.build.image_paths.values()) <= installed
    assert set(playbook.release.executables) == set(playbook.build.image_paths)
    assert playbook.daemon.extra_config == {}  # no stand-in knobs for a real cuzk
    assert playbook.daemon.safety_margin == "5GiB"


def test_a_users_inventory_plans_the_real_cuzk_build(tmp_path: Path) -> None:
    fleet = tmp_path / "fleet.yaml"
    fleet.write_text(USER_INVENTORY)
    plan = load_fleet(str(fleet), sets=(f"curio_dir={tmp_path}",), builds=True)
    build = plan.playbook.build
    assert build.dockerfile.name == "cuzk.Dockerfile"
    assert "rollout-lab" not in build.tag and "lab" not in str(build.dockerfile.name)
    daemon = plan.settings_for("prod-1").daemon
    assert daemon.gpu_devices == [0, 1] and daemon.gpu_threads == 8


def test_the_lab_inventory_names_the_lab_playbook(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ROLLOUT_LAB_PREFIX", "rl-unit")
    fleet = tmp_path / "fleet.yaml"
    fleet.write_text(inventory_text([LabHost("lab-1", 22001, "512m")]))
    plan = load_fleet(str(fleet), builds=True)
    assert plan.playbook.path == LAB_PLAYBOOK
    assert plan.playbook.build.dockerfile.name == "lab-prover.Dockerfile"
    assert plan.playbook.preflight.host_marker == HOST_MARKER
    assert plan.playbook.daemon.safety_margin == "64MiB"  # lowered from cuzk's 5GiB
    explicit = load_fleet(  # --playbook wins
        str(fleet), playbook=str(DEFAULT_PLAYBOOK), sets=(f"curio_dir={tmp_path}",), builds=True
    )
    assert explicit.playbook.build.dockerfile.name == "cuzk.Dockerfile"


def test_without_a_curio_checkout_the_real_build_is_named_in_the_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as err:
        load_playbook(overrides={"curio_dir": str(tmp_path / "no-curio")})
    assert err.value.location is not None and err.value.location.key == "build.context"
    assert "no-curio" in str(err.value)


@pytest.mark.parametrize("size", ["1.5GiB", "1TiB", "512KiB", "64mib", "5 G", "-1GiB"])
def test_sizes_cuzk_cannot_read_are_refused_at_load(size: str, tmp_path: Path) -> None:
    lines = DEFAULT_PLAYBOOK.read_text().splitlines()
    line = lines.index('  safety_margin: "{{ safety_margin }}"') + 1
    with pytest.raises(ConfigError) as err:
        load_playbook(overrides={"safety_margin": size, "curio_dir": str(tmp_path)})
    assert err.value.location is not None
    assert (err.value.location.line, err.value.location.key) == (line, "daemon.safety_margin")
    assert "50GiB" in str(err.value)


@pytest.mark.parametrize("size", ["5GiB", "512MiB", "2GB", "700MB", "1073741824", "64 MiB"])
def test_sizes_cuzk_reads_are_accepted(size: str, tmp_path: Path) -> None:
    overrides = {"safety_margin": size, "curio_dir": str(tmp_path)}
    assert load_playbook(overrides=overrides).daemon.safety_margin == size


def test_total_budget_in_a_form_cuzk_misreads_is_refused(tmp_path: Path) -> None:
    text = DEFAULT_PLAYBOOK.read_text().replace("total_budget: cgroup", "total_budget: 1.5TiB")
    path = tmp_path / "play.yaml"
    path.write_text(text)
    with pytest.raises(ConfigError, match="daemon.total_budget"):
        load_playbook(path)


@pytest.mark.parametrize("gpus", ['"0,1"', "[-1]", "[gpu0]", "x; rm -rf /"])
def test_hostile_gpu_host_vars_are_refused(tmp_path: Path, gpus: str) -> None:
    fleet = tmp_path / "fleet.yaml"
    fleet.write_text(USER_INVENTORY.replace("gpus: [0, 1]", f"gpus: {gpus}"))
    with pytest.raises(ConfigError, match=re.escape("daemon.gpu_devices")):
        load_fleet(str(fleet), sets=(f"curio_dir={tmp_path}",))


def test_a_listen_address_cuzk_cannot_parse_is_refused(tmp_path: Path) -> None:
    text = DEFAULT_PLAYBOOK.read_text().replace('listen: "127.0.0.1:9820"', 'listen: "box:9820"')
    (tmp_path / "curio").mkdir()
    text = text.replace("../dockerfiles", str(DEFAULT_PLAYBOOK.parent.parent / "dockerfiles"))
    path = tmp_path / "play.yaml"
    path.write_text(text.replace("curio_dir: ~/curio", f"curio_dir: {tmp_path / 'curio'}"))
    with pytest.raises(ConfigError, match="daemon.listen") as err:
        load_playbook(path)
    assert "IP address" in str(err.value)
