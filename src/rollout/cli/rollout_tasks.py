"""`inv rollout`, the single-step commands and status."""

from __future__ import annotations

import sys
from pathlib import Path

from invoke.context import Context
from invoke.exceptions import Exit

from rollout.cli.errors import reports_errors
from rollout.cli.taskdef import task
from rollout.errors import UserError

HOSTS_HELP = (
    "Inventory: fleet.yaml, or an Ansible inventory (INI, or YAML named .yaml/.yml). "
    "Or vastai:LABEL: the running vast.ai instances so labelled (a glob). "
    "Default: $ROLLOUT_HOSTS, else the project file's `inventory` (rollout.yaml), else "
    "lab/fleet.yaml."
)
LIMIT_HELP = (
    "Only these hosts, as Ansible's --limit: names, groups, globs, ~regex, @FILE; "
    "`a:!b` all of a but b, `a:&b` those in both (docs/inventory.md)."
)
PLAYBOOK_HELP = (
    "Playbook file. Default: $ROLLOUT_PLAYBOOK, else the project file's `playbook` "
    "(rollout.yaml), else the one the inventory names (the lab's names the lab playbook), "
    "else playbooks/rollout.yaml, else the built-in real cuzk playbook (with a warning)."
)
NO_MINIMUM = -1.0  # `status` without --min-capacity: invoke needs a float default for its type

# The options that render a run (rollout, rollback); each declared here, once.
RUN_OUTPUT_HELP = {
    "json_": "Write every event as a JSON line to this file ('-' for stdout).",
    "junit": "Write a JUnit XML file when the run ends: one testsuite, one testcase per "
    "host with its steps; a host not validated is a failure with its reason and output tail.",
    "summary": "Write a Markdown summary when the run ends (each host's result, durations, "
    "what changed); also appended to $GITHUB_STEP_SUMMARY when that is set.",
    "quiet": "Print only failed steps, hosts that did not end validated, and the result table.",
}


def hosts_file(hosts: str | None) -> str:
    """The inventory: --hosts, else $ROLLOUT_HOSTS, else the project file's, else the lab's
    (each remembers where it came from, for the line every command prints)."""
    # for start-up time: --version and --help load no command
    from rollout.cli.project import LAB_INVENTORY, inventory_for
    from rollout.config.vastai import is_ref

    path = inventory_for(hosts)
    if not is_ref(path) and not Path(path).exists():
        lab_hint = " (bring up the lab with `rollout lab.up`, or pass --hosts FILE)"
        hint = lab_hint if path == LAB_INVENTORY else ""
        raise UserError(f"inventory {path} ({path.source}) does not exist{hint}")
    return path


def playbook_file(playbook: str | None) -> str | None:
    """--playbook, else $ROLLOUT_PLAYBOOK, else the project file's; None: the inventory's
    own, else the default (commands.fleet.choose_playbook says which, and warns)."""
    from rollout.cli.project import playbook_for  # for start-up time

    return playbook_for(playbook)


@task(
    iterable=["set_"],
    help={
        "hosts": HOSTS_HELP,
        "playbook": PLAYBOOK_HELP,
        "set_": "Override a playbook variable, KEY=VALUE (repeatable), like Ansible's -e: "
        "the value is a string (1.10 stays 1.10); one starting with { or [ is JSON/YAML; "
        "@FILE reads a YAML/JSON file of variables, typed as written.",
        "limit": LIMIT_HELP,
        "dry_run": "Read facts and print each host's plan; change nothing.",
        **RUN_OUTPUT_HELP,
        "verbose": "Also print each step's start and every line of the Docker build.",
        "lock_wait": "Seconds to wait for host locks held by another rollout.",
        "break_lock": "Break a host lock that is stale (no heartbeat for "
        "rolling.lock_stale_after) or unreadable; the break is logged.",
        "resume": "Continue the run RUN_ID (runs/RUN_ID.jsonl) whose controller died.",
        "release": "Deploy this release bundle (a folder from `rollout build`, or the URL "
        "`rollout publish` put it at) instead of building: no Docker engine needed.",
        "adopt": "Take over cuzk daemons rollout's supervisor did not start: sets the "
        "playbook's preflight.adopt, whatever the playbook says (docs/adopt.md).",
    },
)
@reports_errors
def rollout(
    c: Context,
    hosts: str | None = None,
    playbook: str | None = None,
    set_: list[str] | None = None,
    limit: str | None = None,
    dry_run: bool = False,
    json_: str | None = None,
    verbose: bool = False,
    lock_wait: float = 0.0,
    break_lock: bool = False,
    resume: str | None = None,
    junit: str | None = None,
    summary: str | None = None,
    quiet: bool = False,
    release: str | None = None,
    adopt: bool = False,
) -> None:
    """Roll a new build out to the fleet, canary first; exit 0 only if every host validated."""
    # for start-up time: --version and --help load no command
    from rollout.commands import app

    inventory = hosts or "" if resume else hosts_file(hosts)
    request = app.RolloutRequest(
        inventory,
        playbook if resume else playbook_file(playbook),
        tuple(set_ or ()),
        limit,
        dry_run,
        json_,
        verbose,
        lock_wait,
        break_lock,
        resume,
        app.Outputs(junit, summary, quiet),
        release,
        adopt,
    )
    result = app.run_rollout(request)
    if result.exit_code:
        raise Exit(code=result.exit_code)


@task(
    help={
        "hosts": HOSTS_HELP,
        "playbook": PLAYBOOK_HELP,
        "to": "Release id to go back to (default: each host's previous release).",
        "limit": LIMIT_HELP,
        **RUN_OUTPUT_HELP,
        "lock_wait": "Seconds to wait for host locks held by another rollout.",
        "break_lock": "Break a host lock that is stale or unreadable; the break is logged.",
    },
)
@reports_errors
def rollback(
    c: Context,
    hosts: str | None = None,
    playbook: str | None = None,
    to: str | None = None,
    limit: str | None = None,
    json_: str | None = None,
    lock_wait: float = 0.0,
    break_lock: bool = False,
    junit: str | None = None,
    summary: str | None = None,
    quiet: bool = False,
) -> None:
    """Take the fleet back to an earlier release, in batches, drained and validated."""
    # loaded when the task runs: the CLI starts without it
    from rollout.commands import app
    from rollout.commands.rollback import run_fleet_rollback

    request = app.RolloutRequest(
        hosts_file(hosts),
        playbook_file(playbook),
        (),
        limit,
        False,
        json_,
        False,
        lock_wait,
        break_lock,
        outputs=app.Outputs(junit, summary, quiet),
    )
    result = run_fleet_rollback(request, to)
    if result.exit_code:
        raise Exit(code=result.exit_code)


def _single(kinds: tuple[str, ...], host: str, hosts: str | None, playbook: str | None,
            lock_wait: float, break_lock: bool, force: bool = False) -> None:
    # for start-up time: --version and --help load no command
    from rollout.commands import single

    forced = {"force": True} if force else {}  # the stop waits for no work in flight
    results = single.run_steps(hosts_file(hosts), playbook_file(playbook), host, kinds,
                               lock_wait, break_lock, **forced)
    why = single.not_done(results)
    if why:
        print(f"{' '.join(kinds)} {host}: not done: {'; '.join(why)}", file=sys.stderr)
        raise Exit(code=1)


LOCK_HELP = {
    "lock_wait": "Seconds to wait for the host's lock while another rollout holds it.",
    "break_lock": "Break a host lock that is stale (no heartbeat for "
    "rolling.lock_stale_after) or unreadable; the break is logged.",
}
SINGLE_HELP = {
    "host": "HOST, the first argument (or --host HOST): a host name from the inventory.",
    "hosts": HOSTS_HELP,
    "playbook": PLAYBOOK_HELP,
    **LOCK_HELP,
}
STOP_HELP = {
    **SINGLE_HELP,
    "force": "Stop at once: no cordon, no wait for the proofs in flight (the playbook's "
    "`work` section); they are killed.",
}


@task(help=STOP_HELP)
@reports_errors
def drain(c: Context, host: str, hosts: str | None = None, playbook: str | None = None,
          lock_wait: float = 0.0, break_lock: bool = False, force: bool = False) -> None:
    """drain HOST: stop the daemon, wait until it is gone and its memory is back.

    The supervisor is held first, so the host is left stopped.
    """
    _single(("stop", "drain"), host, hosts, playbook, lock_wait, break_lock, force)


@task(help=STOP_HELP)
@reports_errors
def stop(c: Context, host: str, hosts: str | None = None, playbook: str | None = None,
         lock_wait: float = 0.0, break_lock: bool = False, force: bool = False) -> None:
    """stop HOST: hold the supervisor and stop the daemon.

    SIGTERM, then SIGKILL after the playbook's stop_grace.
    """
    _single(("stop",), host, hosts, playbook, lock_wait, break_lock, force)


@task(help=SINGLE_HELP)
@reports_errors
def start(c: Context, host: str, hosts: str | None = None, playbook: str | None = None,
          lock_wait: float = 0.0, break_lock: bool = False) -> None:
    """start HOST: release the hold so the supervisor starts the current release.

    Waits until the daemon's status port answers.
    """
    _single(("supervise", "start", "ready"), host, hosts, playbook, lock_wait, break_lock)


@task(help=SINGLE_HELP)
@reports_errors
def validate(c: Context, host: str, hosts: str | None = None, playbook: str | None = None,
             lock_wait: float = 0.0, break_lock: bool = False) -> None:
    """validate HOST: submit a validation proof; succeed only on its COMPLETED line."""
    _single(("validate",), host, hosts, playbook, lock_wait, break_lock)


@task(
    help={
        "hosts": HOSTS_HELP,
        "playbook": PLAYBOOK_HELP,
        "json_": "Print JSON (hosts and capacity) instead of a table.",
        "limit": LIMIT_HELP,
        "min_capacity": "Exit 1 when fewer than this share of hosts (0..1, e.g. 0.8) "
        "are serving; for cron or CI alerts. Without it: exit 1 when any host is dead or "
        "unreachable (0 tolerates them all).",
        "watch": "Refresh the table until Ctrl-C.",
        "interval": "Seconds between refreshes with --watch (default 5).",
        "prom": "Also write Prometheus text-format metrics to this file (replaced atomically) "
        "for node_exporter's textfile collector: serving, state, restarts, memory used and "
        "limit, last exit with its cause.",
        "heal": "After printing, heal the hosts as `rollout heal` does (restart a dead "
        "supervisor); the exit code is then the worse of the two.",
    }
)
@reports_errors
def status(
    c: Context,
    hosts: str | None = None,
    playbook: str | None = None,
    json_: bool = False,
    limit: str | None = None,
    min_capacity: float = NO_MINIMUM,
    watch: bool = False,
    interval: float = 5.0,
    prom: str | None = None,
    heal: bool = False,
) -> None:
    """Per host: daemon state, release, version, uptime, restarts, memory, last exit and cause."""
    # for start-up time: --version and --help load no command
    from rollout.commands import status as health

    path, chosen = hosts_file(hosts), playbook_file(playbook)

    def once() -> int:
        return health.status(
            path, chosen, limit, as_json=json_, prom=prom,
            min_capacity=None if min_capacity == NO_MINIMUM else min_capacity,
        )

    code = health.watch(once, interval) if watch else once()
    if heal:
        # loaded when the task runs: the CLI starts without it
        from rollout.commands.heal import heal as heal_fleet

        code = max(code, heal_fleet(path, chosen, limit))
    if code:
        raise Exit(code=code)


@task(
    help={
        "hosts": HOSTS_HELP,
        "playbook": PLAYBOOK_HELP,
        "limit": LIMIT_HELP,
        **LOCK_HELP,
    }
)
@reports_errors
def heal(c: Context, hosts: str | None = None, playbook: str | None = None,
         limit: str | None = None, lock_wait: float = 0.0, break_lock: bool = False) -> None:
    """Restart a dead supervisor on every host that needs one (it starts the current release
    unless the host is held); locked and journaled; exit 1 unless every host ends serving or
    held."""
    # loaded when the task runs: the CLI starts without it
    from rollout.commands.heal import heal as heal_fleet

    code = heal_fleet(hosts_file(hosts), playbook_file(playbook), limit, lock_wait, break_lock)
    if code:
        raise Exit(code=code)


@task(
    all_flags=("all_",),
    help={
        "host": "HOST, the first argument (or --host HOST): a host name, a group, a glob "
        "(like --limit), or `all`.",
        "all_": "Diagnose every host of the inventory, in parallel (same as HOST `all`).",
        "hosts": HOSTS_HELP,
        "playbook": PLAYBOOK_HELP,
        "json_": "Print JSON instead of a readable report.",
    },
)
@reports_errors
def diagnose(
    c: Context,
    host: str,
    all_: bool = False,
    hosts: str | None = None,
    playbook: str | None = None,
    json_: bool = False,
) -> None:
    """diagnose HOST|GROUP|all: name the cause of each daemon's last exit.

    With the evidence; reads only, bounded. HOST selects like --limit.
    """
    if all_ and host != "all":
        raise UserError(f"give HOST ({host!r}) or --all, not both")
    # for start-up time: --version and --help load no command
    from rollout.commands import diagnose as diagnose_mod
    from rollout.commands.fleet import load_fleet

    plan = load_fleet(hosts_file(hosts), playbook_file(playbook), host)
    code = diagnose_mod.diagnose(plan, as_json=json_)
    if code:
        raise Exit(code=code)


@task(help={"output": "Write to this file instead of stdout."})
@reports_errors
def docs(c: Context, output: str | None = None) -> None:
    """Print the reference of every inventory and playbook option."""
    # loaded when the task runs: the CLI starts without it
    from rollout.config.docs import options_markdown
    from rollout.steps.kinds import HOST_KINDS

    text = options_markdown(HOST_KINDS)
    if output:
        Path(output).write_text(text)
    else:
        print(text)


@task(
    help={
        "run_id": "The run to report on (its journal is runs/RUN_ID.jsonl); `latest`: the "
        "run whose journal was written last.",
        "html": "Write the HTML report to this file: one page, no network needed.",
        "junit": "Write the JUnit XML (one testsuite, one testcase per host with its steps; "
        "a host not validated is a failure with its reason and output tail).",
        "summary": "Write the Markdown summary (each host's result, durations, what changed).",
    }
)
@reports_errors
def report(
    c: Context,
    run_id: str,
    html: str | None = None,
    junit: str | None = None,
    summary: str | None = None,
) -> None:
    """Render a finished run from its journal: an HTML timeline, JUnit XML or Markdown."""
    # loaded when the task runs: the CLI starts without it
    from rollout.commands.fleet import runs_dir
    from rollout.output.journal import LATEST, journal_path, latest_run
    from rollout.reports.files import write_run_reports

    if not (html or junit or summary):
        raise UserError("give at least one of --html FILE, --junit FILE, --summary FILE")
    runs = runs_dir()
    run = latest_run(runs) if run_id == LATEST else run_id
    if run != run_id:
        print(f"the latest run: {run}", file=sys.stderr)
    write_run_reports(journal_path(runs, run), html, junit, summary)
