"""The command line: invoke tasks, also installed as the `rollout` command.

The engine never imports this package; tasks stay thin and call rollout.commands.app.
"""

from __future__ import annotations

from invoke.collection import Collection

from rollout import __version__
from rollout.cli import bench_tasks, inventory_tasks, lab_tasks, release_tasks, rollout_tasks
from rollout.cli.program import RolloutProgram

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
)
namespace.add_collection(lab_tasks.ns)

program = RolloutProgram(namespace=namespace, version=__version__, name="rollout", binary="rollout")


def main() -> None:
    program.run()
