"""Room for a run's open files: a run keeps a connection open to every locked host for its
whole length (the lock's, which the host's steps use), so a fleet larger than the process's
open-file limit (`ulimit -n`, often 1,024) would fail hosts one by one, mid-run, with "Too
many open files". Before any lock is taken the soft limit is raised as far as the hard limit
allows (as Go's runtime and OpenSSH's sshd do); a fleet past the hard limit is refused,
naming the figures and the fix, before any host is touched."""

from __future__ import annotations

import resource

from rollout.errors import EnvironmentProblem

RESERVE = 64  # the process's own: the journal, the console, Python's, a build's
PER_WORKER = 2  # at most this many more files per host at work (an upload's file, a pipe)


def files_needed(hosts: int, workers: int) -> int:
    """Open files a run of `hosts` hosts, `workers` at once, may hold at the same time."""
    return hosts + PER_WORKER * workers + RESERVE


def ensure_open_files(hosts: int, workers: int) -> None:
    """Raise the soft open-file limit to what the run needs (never above the hard limit,
    never lowered); EnvironmentProblem where the hard limit is too low."""
    need = files_needed(hosts, workers)
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if _enough(soft, need):
        return
    held = f"{hard} (the hard limit, `ulimit -Hn`)"
    if _enough(hard, need):
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (need, hard))
            return
        except (ValueError, OSError):  # a sandbox that refuses even that
            held = f"{soft} (raising it to {need} was refused)"
    raise EnvironmentProblem(
        f"a run keeps a connection open to each of its {hosts} hosts: it needs up to {need} "
        f"open files, and this process may open at most {held}. Raise the "
        f"limit (`ulimit -n {need}` in the shell that runs rollout, as root or after raising "
        "the hard limit: LimitNOFILE= for a systemd service, nofile in "
        "/etc/security/limits.conf), or split the fleet: `--limit` or an inventory per "
        "controller (docs/bench.md, 'Past one machine').")


def _enough(limit: int, need: int) -> bool:
    return limit == resource.RLIM_INFINITY or limit >= need
