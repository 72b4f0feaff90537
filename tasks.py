"""invoke tasks for this repository: `inv --list`. The same tasks install as `rollout`."""

from rollout.cli import namespace as ns

__all__ = ["ns"]
