"""The command line: invoke tasks, also installed as the `rollout` command.

The engine never imports this package; tasks stay thin and call rollout.commands.app.
"""

from __future__ import annotations

import gc
import os
import sys
from typing import Any

from rollout.cli.version import FLAGS, version_line


def __getattr__(name: str) -> Any:
    """`namespace` and `program` (rollout.cli.command), loaded when first asked for: invoke
    and the tasks cost more than all of `rollout --version`."""
    if name in ("namespace", "program"):
        from rollout.cli import command

        return getattr(command, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def main() -> None:
    """The `rollout` command's process (the console script, `python -m rollout`): the
    collector's settings for a process that ends with its command, then the command."""
    collect_less_often()
    try:
        if sys.argv[1:] in FLAGS:
            print(version_line())
        else:
            run()
    finally:
        exit_without_collecting()


def run() -> None:
    """The command that sys.argv names, with the exit status it calls for (SystemExit)."""
    from rollout.cli.command import program

    try:
        program.run()
    except BrokenPipeError:  # `rollout status | head`: the reader left; say nothing more
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        sys.exit(141)  # as a shell reports a pipe's writer killed by SIGPIPE


def collect_less_often() -> None:
    """A young-object pass of the cycle collector every 10,000 new objects, not every 700:
    most of what a command makes lives until it exits (modules, classes, the plan), and at
    the default pace the collector walked it over and over, 0.04 CPU-seconds of an 8-host
    rollout's 0.8 (gc.callbacks), half of it saved so. Cycles are still collected."""
    gc.set_threshold(10_000, 10, 10)


def exit_without_collecting() -> None:
    """Leave what is still alive to the process's end: the interpreter's shutdown otherwise
    walks every object it holds (all the modules a command loaded) in full collections, 0.13
    CPU-seconds of an 8-host rollout's 1.1. Nothing is lost: every file rollout writes is
    flushed as it is written or closed by its owner, never by the collector."""
    gc.freeze()
