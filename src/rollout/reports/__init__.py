"""Reports: renderings of a run's events (JUnit, Markdown summary, HTML) and of the fleet's
status (Prometheus metrics). Each reads plain event data; none talks to a host."""
