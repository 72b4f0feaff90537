"""The config layer: inventory and playbook files -> validated, plain data. No I/O
beyond reading the files; errors are ConfigError naming the file, line and key."""
