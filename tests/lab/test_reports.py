"""CI outputs of real lab runs: JUnit, Markdown summary, the HTML report of a run that had
a rollback (opened in headless Chromium), and `status --prom` read by Prometheus' parser."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
from junitparser import Failure, JUnitXml, Skipped
from prometheus_client.parser import text_string_to_metric_families

from rollout.lab.apt import ensure_command

from .conftest import LabFleet
from .rollout_helpers import CliRun, reset_host, rollout_args, run_cli

pytestmark = pytest.mark.lab
HOSTS = ["lab-1", "lab-2", "lab-3"]
# The old daemon's memory comes back slowly (96 MiB at 32 MiB/s), so a drain has a curve.
FAST = ("--set", "lab_knobs={pool_mib: 96, load_secs: 0.3, drain_mib_per_sec: 32, "
        "prove_secs: 0.1}", "--set", "ready_timeout=15", "--set", "stop_grace=3")


@pytest.fixture(scope="module")
def crashed(lab_fleet: LabFleet, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, CliRun]:
    """A base release everywhere (lab-3 goes to v2 and is rolled back to it), then a build
    that crashes at start: the canary rolls back."""
    for host in HOSTS:
        reset_host(host)
    work = tmp_path_factory.mktemp("reports")
    base = run_cli(work, *rollout_args(lab_fleet.fleet_path, "base"), *FAST, "--quiet")
    assert base.code == 0, base.stderr[-3000:]
    head = base.stderr.split(f"rollout {base.events[0]['run_id']}")[0]
    assert not [line for line in head.splitlines() if line.startswith(("lab-", "controller"))]
    v2 = run_cli(work, *rollout_args(lab_fleet.fleet_path, "v2"), *FAST, "--limit", "lab-3")
    assert v2.code == 0, v2.stderr[-3000:]
    back = run_cli(work, "rollback", "--hosts", str(lab_fleet.fleet_path), "--limit", "lab-3",
                   "--junit", str(work / "rollback.xml"), "--summary", str(work / "rollback.md"))
    assert back.code == 0, back.stderr[-3000:]
    run = run_cli(
        work, *rollout_args(lab_fleet.fleet_path, "crash"), *FAST, "--set", "fault=crash_at_start",
        "--junit", str(work / "junit.xml"), "--summary", str(work / "summary.md"),
        env={"GITHUB_STEP_SUMMARY": str(work / "step-summary.md"), "NO_COLOR": "1"},
    )
    assert run.code == 1, run.stderr[-3000:]
    return work, run


def test_junit_and_summary_of_a_run_with_a_rollback(crashed: tuple[Path, CliRun]) -> None:
    work, run = crashed
    xml = JUnitXml.fromfile(str(work / "junit.xml"))
    suites = list(xml)
    assert len(suites) == 1
    cases = {case.name: case for case in suites[0]}
    assert set(cases) == {"controller", *HOSTS}
    canary = cases["lab-1"]
    failure = next(r for r in canary.result if isinstance(r, Failure))
    assert "died during start-up" in failure.message and failure.type == "rolled_back"
    (failed,) = [e for e in run.events if e["kind"] == "step_end" and e["status"] == "failed"]
    assert f"--- output tail of {failed['step']} ---" in (failure.text or "")
    assert failed["data"]["output"][-200:] in (failure.text or "")
    assert "rollback-validate" in canary.system_out
    for host in ("lab-2", "lab-3"):
        assert any(isinstance(r, Skipped) for r in cases[host].result)
    summary = (work / "summary.md").read_text()
    assert "| lab-1 | ↩️ rolled\\_back |" in summary and "died during start-up" in summary
    assert (work / "step-summary.md").read_text() == summary
    assert "\x1b[" not in run.stderr
    long_lines = [line for line in run.stderr.splitlines() if len(line) > 100]
    assert any("lab-1" in line and "start" in line for line in long_lines), run.stderr


def test_junit_of_a_fleet_rollback(crashed: tuple[Path, CliRun]) -> None:
    work, _ = crashed
    (suite,) = list(JUnitXml.fromfile(str(work / "rollback.xml")))
    assert suite.name.startswith("rollback ") and suite.tests == 1 and suite.failures == 0
    (case,) = list(suite)
    assert case.name == "lab-3" and case.is_passed and case.classname == "rollout.rollback"
    assert "validate" in case.system_out and "switch" in case.system_out
    assert "| lab-3 | ✅ validated |" in (work / "rollback.md").read_text()


def _chromium(*args: str) -> str:
    ensure_command("chromium", "chromium")
    argv = ["chromium", "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
            "--disable-dev-shm-usage", *args]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=120, check=True)
    return done.stdout


def test_html_report_opens_in_chromium(crashed: tuple[Path, CliRun]) -> None:
    work, run = crashed
    run_id = run.events[0]["run_id"]
    page = work / "report.html"
    made = run_cli(work, "report", run_id, "--html", str(page))
    assert made.code == 0, made.stderr
    text = page.read_text()
    for loads in ("src=", "href=", "url(", "@import", "<link", "<script"):
        assert loads not in text, f"the page would load something: {loads}"
    shot = work / "report.png"
    _chromium(f"--screenshot={shot}", "--window-size=1100,900", page.as_uri())
    assert shot.stat().st_size > 10_000
    print(f"screenshot: {shot}")
    dom = _chromium("--dump-dom", page.as_uri())
    steps = [(e["host"], e["step"]) for e in run.events if e["kind"] == "step_end"]
    for host, step in steps:
        assert f'data-host="{host or "controller"}" data-step="{step}"' in dom, (host, step)
    assert dom.count('class="step ') == len(steps)
    (failed,) = [e for e in run.events if e["kind"] == "step_end" and e["status"] == "failed"]
    assert f'class="step status-failed" data-host="lab-1" data-step="{failed["step"]}"' in dom
    assert dom.count('class="rollback-mark"') == 1
    drained = {e["host"] for e in run.events
               if e["kind"] == "step_end" and "drain" in e["step"] and e["data"].get("samples")}
    assert drained == {"lab-1"}
    for host in drained:
        assert f'<polyline class="curve" data-host="{host}"' in dom
    assert 'class="budget"' in dom


def test_status_prom_parses(crashed: tuple[Path, CliRun], lab_fleet: LabFleet) -> None:
    work, _ = crashed
    out = work / "metrics" / "rollout.prom"
    run = run_cli(work, "status", "--hosts", str(lab_fleet.fleet_path), "--prom", str(out))
    assert run.code == 0, run.stderr
    families = {f.name: f for f in text_string_to_metric_families(out.read_text())}
    serving = {s.labels["host"]: s.value for s in families["rollout_daemon_serving"].samples}
    assert serving == dict.fromkeys(HOSTS, 1.0)
    limits = {s.labels["host"]: s.value for s in families["rollout_memory_limit_bytes"].samples}
    assert limits == dict.fromkeys(HOSTS, 512 * 1024 * 1024)
    used = families["rollout_memory_used_bytes"].samples
    assert all(0 < s.value < 512 * 1024 * 1024 for s in used) and len(used) == 3
    running = [s.labels["host"] for s in families["rollout_daemon_state"].samples
               if s.labels["state"] == "running" and s.value == 1]
    assert sorted(running) == HOSTS
    exits = {s.labels["host"]: s.labels for s in
             families["rollout_daemon_last_exit_timestamp_seconds"].samples}
    assert exits["lab-1"]["cause"] not in ("", "unknown"), exits
    info = {s.labels["host"]: s.labels for s in families["rollout_release_info"].samples}
    assert sorted(info) == HOSTS and all(len(i["release"]) == 12 for i in info.values())
    restarts = {s.labels["host"]: s.value for s in families["rollout_daemon_restarts"].samples}
    # The crashed start ran under rollout's hold (a held exit, no restart): counts stay whole.
    assert sorted(restarts) == HOSTS and all(v >= 0 and v == int(v) for v in restarts.values())
    for host in HOSTS:
        at_1 = [s for s in families["rollout_daemon_state"].samples
                if s.labels["host"] == host and s.value == 1]
        assert len(at_1) == 1, (host, at_1)
    ensure_command("promtool", "prometheus")
    check = subprocess.run(["promtool", "check", "metrics"], input=out.read_text(),
                           capture_output=True, text=True, timeout=60)
    assert check.returncode == 0 and not check.stdout + check.stderr, check.stdout + check.stderr
    assert not list(out.parent.glob("*.tmp*")), "temporary file left behind"
    json.dumps(exits)
