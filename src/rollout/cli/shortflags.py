"""The one table of short flags: each letter means one option, in every task.

invoke would give each task's options a short flag of its own (the first free letter of the
name), so `-e` was `--release` in one task and `-o` meant `--hosts` here and `--lock-wait`
there. Tasks made with rollout's `task` take no automatic short flag; an option has one only
when its long name is in this table, and then the same one wherever it appears.
"""

from __future__ import annotations

SHORT_FLAGS: dict[str, str] = {
    "set": "e",  # like ansible-playbook -e
    "limit": "l",  # like ansible-playbook -l
    "playbook": "p",
    "dry-run": "d",
    "json": "j",
    "quiet": "q",
    "verbose": "v",
    "output": "o",
    "to": "t",
    "all": "a",
    "watch": "w",
    "memory": "m",
}
"""Long option name -> its short flag. `-h` is every task's `--help`; the command's own
options (before any task) are `-h/--help`, `-V/--version` and `--list`."""


def names_for(long_name: str) -> tuple[str, ...]:
    """An option's names: its long name, and its short flag where the table has one."""
    short = SHORT_FLAGS.get(long_name)
    return (long_name, short) if short else (long_name,)
