"""A build you can watch (issue 29), with the lab's Docker engine: a `RUN` that sleeps 30 s and
prints a line every 5 s shows progress on the console while it runs (read as it comes, off a
terminal), and a failing `RUN` shows its last error line on the console and in the JUnit
file. Both build FROM the lab's local base image: no registry is asked."""

from __future__ import annotations

import queue
import re
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import docker
import pytest
from junitparser import Failure, JUnitXml

from rollout import lab

from .conftest import LabFleet
from .rollout_helpers import REPO, _env, run_cli

pytestmark = pytest.mark.lab
TICKS = "for i in 1 2 3 4 5 6; do echo tick $i; sleep 5; done"
EXECUTABLES = ("RUN printf '#!/bin/sh\\n' > /usr/local/bin/cuzk-daemon && "
               "cp /usr/local/bin/cuzk-daemon /usr/local/bin/cuzk-bench && "
               "chmod +x /usr/local/bin/cuzk-daemon /usr/local/bin/cuzk-bench")


@pytest.fixture(scope="module")
def repository(docker_client: docker.DockerClient) -> Iterator[str]:
    """Where the builds are tagged; every image under it removed at the end."""
    name = f"{lab.lab_prefix()}-buildwatch/prover"
    yield name
    for image in docker_client.images.list(name=name):
        docker_client.images.remove(image.id, force=True)


def playbook(folder: Path, base: str, run: str, repository: str) -> Path:
    """The lab's playbook, building `FROM base` then `RUN run` (a fresh build each time)."""
    folder.mkdir(parents=True)
    (folder / "Dockerfile").write_text(
        f"FROM {base}\n{EXECUTABLES}\nRUN echo {uuid.uuid4().hex} && {run}\n")
    text = (REPO / "playbooks" / "lab.yaml").read_text()
    text = text.replace("dockerfile: ../dockerfiles/lab-prover.Dockerfile",
                        f"dockerfile: {folder / 'Dockerfile'}")
    text = text.replace("context: ../dockerfiles", f"context: {folder}")
    text = text.replace("image: rollout-lab/prover", f"image: {repository}")
    for name in ("files/params", "files/c1.json"):
        text = text.replace(f" {name}", f" {REPO / 'playbooks' / name}")
    path = folder / "playbook.yaml"
    path.write_text(text)
    return path


def lines_of(stream: object) -> queue.Queue[tuple[float, str]]:
    """Each line of `stream` with the time it came, read by a thread as it comes."""
    lines: queue.Queue[tuple[float, str]] = queue.Queue()

    def read() -> None:
        for line in stream:  # type: ignore[attr-defined]
            lines.put((time.monotonic(), line))
        lines.put((time.monotonic(), ""))

    threading.Thread(target=read, daemon=True).start()
    return lines


def test_a_long_run_shows_progress_while_it_runs(
    tmp_path: Path, docker_client: docker.DockerClient, repository: str
) -> None:
    book = playbook(tmp_path / "ticks", lab.ensure_base_image(docker_client), TICKS, repository)
    process = subprocess.Popen(
        [sys.executable, "-m", "rollout", "build", "--out", str(tmp_path / "out"),
         "--playbook", str(book)],
        cwd=REPO, env=_env(tmp_path, None), stderr=subprocess.PIPE, stdout=subprocess.PIPE,
        text=True)
    lines = lines_of(process.stderr)
    seen: list[tuple[float, str]] = []
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        try:
            at, line = lines.get(timeout=deadline - time.monotonic())
        except queue.Empty:
            break
        if not line:
            break
        seen.append((at, line))
    process.wait(timeout=60)
    text = "".join(line for _, line in seen)
    assert process.returncode == 0, text[-3000:]
    run_step = [at for at, line in seen if re.search(r"step 3/3 RUN echo \w+ && for i", line)]
    ticks = [at for at, line in seen if re.search(r"step 3/3 .*: tick \d", line)]
    assert run_step and ticks, text[-3000:]
    assert ticks[0] - run_step[0] <= 10, text[-3000:]  # the first tick within 10 s
    during = [at for at in run_step if at <= ticks[-1]]
    gaps = [b - a for a, b in zip(during, during[1:], strict=False)]
    assert max(gaps) <= 8, (gaps, text[-3000:])  # never silent while the RUN sleeps
    assert ticks[-1] - run_step[0] >= 20  # the lines came while it ran, not all at its end


def test_a_failing_run_shows_its_error_line_on_the_console_and_in_junit(
    tmp_path: Path, lab_fleet: LabFleet, docker_client: docker.DockerClient, repository: str
) -> None:
    failing = "echo compiling; echo 'error: boom' >&2; exit 3"
    book = playbook(tmp_path / "fails", lab.ensure_base_image(docker_client), failing,
                    repository)
    junit = tmp_path / "junit.xml"
    run = run_cli(tmp_path, "rollout", "--hosts", str(lab_fleet.fleet_path), "--playbook",
                  str(book), "--junit", str(junit), env={"NO_COLOR": "1"})
    assert run.code == 1, run.stderr[-3000:]
    assert re.search(r"build .*failed .*step 3/3 .*exit code 3", run.stderr), run.stderr[-3000:]
    assert "  | error: boom" in run.stderr, run.stderr[-3000:]
    build = run.steps(None)["build"]  # type: ignore[arg-type]
    assert {"compiling", "error: boom"} <= set(build["data"]["last_lines"])  # stdout, stderr
    case = next(c for suite in JUnitXml.fromfile(str(junit)) for c in suite
                if c.name == "controller")
    failure = next(r for r in case.result if isinstance(r, Failure))
    assert "exit code 3" in (failure.message or "") and "error: boom" in (failure.text or "")
