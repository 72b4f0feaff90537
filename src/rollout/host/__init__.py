"""A host: its layout, its facts, the scripts that run on it."""
