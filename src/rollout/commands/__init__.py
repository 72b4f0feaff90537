"""The commands: rollout, rollback, status, diagnose, the single steps, dry run."""
