"""`rollout inventory`: what rollout made of an inventory (hosts, groups, each host's
connection settings and vars, and where each value came from). Reads files only."""

from __future__ import annotations

from invoke.context import Context

from rollout.cli.errors import reports_errors
from rollout.cli.rollout_tasks import HOSTS_HELP, hosts_file
from rollout.cli.taskdef import task
from rollout.errors import UserError


@task(
    help={
        "hosts": HOSTS_HELP,
        "host": "Print that host's merged vars as JSON, as `ansible-inventory --host HOST` "
        "does.",
        "graph": "Print a tree of groups and hosts, as `ansible-inventory --graph` does.",
        "list_": "Print JSON in ansible-inventory's --list shape: each group's hosts and "
        "children; under _meta.hostvars each host's address, port, user, key, proxy_jump, "
        "groups and vars, and `sources`: the file and line each value came from (the default).",
    },
)
@reports_errors
def inventory(
    c: Context, hosts: str | None = None, graph: bool = False, list_: bool = False,
    host: str | None = None,
) -> None:
    """Show what rollout made of an inventory: --list (JSON, with sources), --graph, or
    --host HOST (its vars)."""
    if graph and list_:
        raise UserError("rollout inventory takes --graph or --list, not both")
    if host is not None and (graph or list_):
        raise UserError("--host HOST prints that host's vars: give it without --graph or --list")
    # for start-up time: --version and --help load no command
    from rollout.commands.inventory_view import as_graph, as_json, describe, host_vars

    if host is not None:
        print(host_vars(hosts_file(hosts), host))
        return
    view = describe(hosts_file(hosts))
    print(as_graph(view) if graph else as_json(view))
