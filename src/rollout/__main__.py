"""`python -m rollout ...` runs the same tasks as the `rollout` command."""

from rollout.cli import main

main()
