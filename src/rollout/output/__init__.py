"""Output: events, the console, the journal."""
