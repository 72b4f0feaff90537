"""The engine: plan, run, recovery (rollback), retry, locks."""
