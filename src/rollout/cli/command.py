"""The `rollout` command: every task in one invoke namespace, and the program that runs it."""

from __future__ import annotations

from invoke.collection import Collection

from rollout import __version__
from rollout.cli import (
    bench_tasks,
    init_tasks,
    inventory_tasks,
    lab_tasks,
    release_tasks,
    rollout_tasks,
)
from rollout.cli.programdef import RolloutProgram
from rollout.cli.version import NAME

namespace = Collection(
    rollout_tasks.rollout,
    rollout_tasks.rollback,
    rollout_tasks.drain,
    rollout_tasks.start,
    rollout_tasks.stop,
    rollout_tasks.validate,
    rollout_tasks.status,
    rollout_tasks.heal,
    rollout_tasks.diagnose,
    rollout_tasks.docs,
    rollout_tasks.report,
    inventory_tasks.inventory,
    release_tasks.build,
    release_tasks.publish,
    bench_tasks.bench,
    init_tasks.init,
)
namespace.add_collection(lab_tasks.ns)

program = RolloutProgram(namespace=namespace, version=__version__, name=NAME, binary=NAME)
