"""The validation's budget watch follows its own job (issue 27). cuzk-bench `single` names
its job with a fresh UUID (the caller cannot choose it) and curio names its jobs
porep-<miner>-<sector>; /status names no caller. Here curio's proof reaches the daemon at
the validation's moment and registers first (the oldest new job, which today's rule took
as the validation's: it moved, the watch never fired); the budget holds one partition at a
time, so the validation's job waits behind it and the watch must name that job and fire
after validate.budget_wait, not at validate.timeout. And the stand-in gives job ids as
cuzk does: a request that names none gets a UUID; a reused id is not refused, its callers
share the answer of the first job of that id to end, and /status lists one entry per id."""

from __future__ import annotations

import base64
import json
import re
import time
from pathlib import Path

import pytest

from rollout import lab

from .conftest import LISTEN, STATUS, LabFleet, Standin
from .rollout_helpers import (
    daemon_pid,
    fresh_fleet,
    inventory_with,
    rollout_args,
    run_cli,
    sh,
    status_json,
)
from .test_standin_work import C1, start
from .test_validation_budget_wait import KNOBS, playbook_with_a_budget

pytestmark = pytest.mark.lab
HOST = "lab-1"
WRAPPER = "/usr/local/bin/lab-curio-at-once"
BENCH_ID = r"[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}"
BENCH = '["{{ release_dir }}/cuzk-bench", -a,'

# Run before the validation's bench, in its process group: curio's proof (same C1, same
# ids, named as curio names its jobs) submitted and seen registered, then the bench.
CURIO_FIRST = """#!/bin/sh
python3 -c '
import base64, http.client, json, sys
c1 = base64.b64encode(open(sys.argv[1], "rb").read()).decode()
conn = http.client.HTTPConnection("127.0.0.1", 9820)
conn.request("POST", "/prove", json.dumps({"job_id": sys.argv[2], "proof_type": "porep",
             "vanilla_proof": c1, "sector_num": 1, "miner_id": 1000}))
conn.getresponse().read()
' /data/32gbench/c1.json OTHER &
tries=0
until curl -fsS http://127.0.0.1:9821/status | grep -q '"OTHER"'; do
  tries=$((tries + 1)); [ "$tries" -lt 300 ] || exit 97
  sleep 0.1
done
exec "$@"
"""


def playbook_curio_first(work: Path, other: str) -> Path:
    """The 256 MiB playbook whose validation runs through CURIO_FIRST on the host."""
    path = playbook_with_a_budget(work)
    text = path.read_text()
    assert text.count(BENCH) == 1
    path.write_text(text.replace(BENCH, f'["{WRAPPER}", "{{{{ release_dir }}}}/cuzk-bench", -a,'))
    script = base64.b64encode(CURIO_FIRST.replace("OTHER", other).encode()).decode()
    sh(HOST, f"echo {script} | base64 -d > {WRAPPER} && chmod 755 {WRAPPER}")
    return path


def test_the_watch_names_the_validations_own_job_when_curios_arrives_with_it(
    lab_fleet: LabFleet, tmp_path: Path
) -> None:
    fresh_fleet(lab_fleet, [HOST])
    lab.set_sidecar(HOST, None)  # the only other proof is the one CURIO_FIRST submits
    other = f"porep-1000-{int(time.time())}"
    try:
        first = run_cli(tmp_path, *rollout_args(lab_fleet.fleet_path, "b1"), "--playbook",
                        str(playbook_with_a_budget(tmp_path)), "--set", KNOBS, "--limit", HOST)
        assert first.code == 0, first.stderr[-3000:]
        pid = daemon_pid(HOST)
        playbook = playbook_curio_first(tmp_path, other)
        inventory = inventory_with(tmp_path, lab_fleet.fleet_path, HOST, "validate_timeout: 300")
        began = time.monotonic()
        checked = run_cli(tmp_path, "validate", HOST, "--hosts", str(inventory), "--playbook",
                          str(playbook))
        took = time.monotonic() - began
        jobs = {p["job_id"]: p for p in status_json(HOST)["pipelines"]}
    finally:
        sh(HOST, f"rm -f {WRAPPER}")
        lab.set_sidecar(HOST, lab.BUSY_SIDECAR)
    said = checked.stdout + checked.stderr
    assert checked.code == 1, said[-3000:]
    assert took < 60, took  # budget_wait (1 s), not validate.timeout (300 s)
    named = re.search(r"its proof's job (\S+) waits for cuzk's memory budget", said)
    assert named and re.fullmatch(BENCH_ID, named.group(1)), said[-3000:]
    mine = jobs[named.group(1)]  # the validation's own job: cuzk keeps it after the stop
    assert jobs[other]["started_secs_ago"] > mine["started_secs_ago"]  # curio's came first
    assert "with other work holding the budget" in said
    assert f"the jobs in flight: porep-c2 {other}" in said
    assert "cuzk-bench" not in sh(HOST, "ps -eo args | grep '[c]uzk-bench' || true")
    assert daemon_pid(HOST) == pid


# The same id twice (the second registered once the first has a partition done), then no id.
COLLIDE = """
import base64, http.client, json, threading, time
HOST, PORT, SHOW = "127.0.0.1", {port}, {show}
c1 = base64.b64encode(open({c1!r}, "rb").read()).decode()

def prove(job_id, out):
    conn = http.client.HTTPConnection(HOST, PORT)
    conn.request("POST", "/prove", json.dumps({{"job_id": job_id, "proof_type": "porep",
                 "vanilla_proof": c1, "sector_num": 1, "miner_id": 1000}}))
    out.append(json.loads(conn.getresponse().read()))

def entries(job_id):
    conn = http.client.HTTPConnection(HOST, SHOW)
    conn.request("GET", "/status")
    return [p for p in json.loads(conn.getresponse().read())["pipelines"]
            if p["job_id"] == job_id]

def until(test):
    end = time.monotonic() + 60
    while not (seen := test()):
        assert time.monotonic() < end, "not in time"
        time.sleep(0.05)
    return seen

answers = {{"first": [], "second": [], "unnamed": []}}
calls = [threading.Thread(target=prove, args=("porep-1000-1", answers["first"]))]
calls[0].start()
until(lambda: [e for e in entries("porep-1000-1") if e["partitions_done"] > 0])
calls.append(threading.Thread(target=prove, args=("porep-1000-1", answers["second"])))
calls[1].start()
listed = until(lambda: [e for e in entries("porep-1000-1") if e["partitions_done"] == 0] and
               entries("porep-1000-1"))
for call in calls:
    call.join()
prove("", answers["unnamed"])
print(json.dumps({{**answers, "listed": len(listed)}}))
"""


def test_the_standin_gives_job_ids_as_cuzk_does(standin: Standin) -> None:
    start(standin, {"prove_secs": 2.0})
    script = COLLIDE.format(port=LISTEN.rsplit(":", 1)[1], show=STATUS.rsplit(":", 1)[1], c1=C1)
    standin.put("/tmp/collide.py", script.encode())
    seen = json.loads(standin.ok("python3 /tmp/collide.py").strip().splitlines()[-1])
    [first], [second], [unnamed] = seen["first"], seen["second"], seen["unnamed"]
    assert first == second and first["status"] == "COMPLETED"  # one answer for both callers
    assert first["job_id"] == "porep-1000-1" and seen["listed"] == 1  # one entry per id
    assert re.fullmatch(BENCH_ID, unnamed["job_id"]) and unnamed["status"] == "COMPLETED"
